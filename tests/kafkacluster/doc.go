// Package kafkacluster holds the tests of the whole chain against a
// replicated Kafka: the agent (its binary) sends over TLS to three KRaft
// brokers (testenv.StartKafkaCluster: replication factor 3,
// min.insync.replicas 2), `spikehunt ingest` consumes into the embedded
// store behind `spikehunt serve-clickhouse`, under a paced load of
// requests with unique trace ids, while one fault at a time hits the
// cluster: the partition leader's kill -9, a rolling restart of all three
// brokers, one broker's disk filling up. Each test counts the requests in
// the store (none lost, none twice), checks that the agent and the ingest
// ran through it without a restart, and logs how long records stopped
// arriving; BenchmarkKafkaLeaderFailover reports that pause for the
// leader's kill (docs/kafka.md). Only its _test.go files hold code.
package kafkacluster
