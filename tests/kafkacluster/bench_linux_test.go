package kafkacluster

import "testing"

// BenchmarkKafkaLeaderFailover is the pause the leader's kill -9 makes:
// the longest stretch, from the kill until the partitions are back in
// sync and a few seconds more, in which no new record of the agent's
// became readable to a consumer (docs/kafka.md). Each iteration is a
// fresh cluster and chain, checked as the test checks it.
func BenchmarkKafkaLeaderFailover(b *testing.B) {
	var sum float64
	for range b.N {
		sum += leaderKill(b).pause.Seconds()
	}
	b.ReportMetric(sum/float64(b.N), "kafka.leader_failover_pause_s:s")
}

// BenchmarkKafkaRollingRestart is the longest pause during a rolling
// restart of the three brokers, measured the same way.
func BenchmarkKafkaRollingRestart(b *testing.B) {
	var sum float64
	for range b.N {
		sum += rollingRestart(b).pause.Seconds()
	}
	b.ReportMetric(sum/float64(b.N), "kafka.rolling_restart_pause_s:s")
}
