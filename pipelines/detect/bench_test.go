package detect

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// BenchmarkDetectFullPass is one pass over a whole fleet-day of 1 s
// rollups: SPIKEHUNT_BENCH_HOSTS hosts (default 100) × SPIKEHUNT_BENCH_HOURS
// hours (default 6), one request per host-second at ~4 ms, every host
// stalling 1 s every 15–20 min at its own phase. The target (DESIGN.md
// §5 issue) is 24 h × 1,000 hosts in ≤ 5 s on two cores: run it with
// SPIKEHUNT_BENCH_HOSTS=1000 SPIKEHUNT_BENCH_HOURS=24 (loading takes
// minutes). latency_1s is filled directly, one t-digest state per row, as
// the materialized view would from one request; there are no counters, so
// the suspects stage measures its overhead only.
func BenchmarkDetectFullPass(b *testing.B) {
	hosts, hours := envInt("SPIKEHUNT_BENCH_HOSTS", 100), envInt("SPIKEHUNT_BENCH_HOURS", 6)
	ctx := context.Background()
	st := migrated(b)
	start := time.Now().UTC().Truncate(time.Hour).Add(-time.Duration(hours+1) * time.Hour)
	period := "(900 + cityHash64(h, 11) % 301)"
	for hour := 0; hour < hours; hour++ {
		q := fmt.Sprintf(`INSERT INTO latency_1s
SELECT toDateTime(%[1]d + s, 'UTC'), 'billy', concat('host-', leftPad(toString(h), 4, '0')), if(h %% 2 = 0, 'gen4', 'gen5'),
    1, 1, lat, lat, arrayReduce('quantilesTDigestWeightedState(0.5, 0.9, 0.99, 0.999)', [lat], [toUInt32(1)])
FROM (
    SELECT intDiv(number, %[2]d) + %[3]d AS s, number %% %[2]d AS h,
        toUInt32(if((s + %[4]s - cityHash64(h, 12) %% %[4]s) %% %[4]s = 0, 1000000, 3500 + cityHash64(number, %[3]d) %% 1000)) AS lat
    FROM numbers(%[5]d)
)`, start.Unix(), hosts, hour*3600, period, hosts*3600)
		if err := st.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	cfg := Config{Service: "billy", From: start, To: start.Add(time.Duration(hours) * time.Hour)}
	var spikes, suspects, patterns, total time.Duration
	windows := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := Pass(ctx, st, cfg)
		if err != nil {
			b.Fatal(err)
		}
		spikes += res.Timing.Spikes
		suspects += res.Timing.Suspects
		patterns += res.Timing.Patterns
		total += res.Timing.Total
		windows = len(res.Spikes)
	}
	b.StopTimer()
	hostSeconds := float64(hosts * hours * 3600)
	// The figure make bench-detect prints (with 1,000 hosts × 24 h).
	b.ReportMetric(total.Seconds()/float64(b.N), fmt.Sprintf("detect.fleet_%dh_%d_hosts_s:s", hours, hosts))
	b.ReportMetric(hostSeconds/(total.Seconds()/float64(b.N)), "host-seconds/s")
	b.ReportMetric(spikes.Seconds()/float64(b.N), "spikes-s/op")
	b.ReportMetric(suspects.Seconds()/float64(b.N), "suspects-s/op")
	b.ReportMetric(patterns.Seconds()/float64(b.N), "patterns-s/op")
	b.ReportMetric(float64(windows), "windows")
}

func envInt(key string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(key)); err == nil && n > 0 {
		return n
	}
	return def
}
