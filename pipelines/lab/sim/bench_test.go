package sim

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// BenchmarkLoad simulates SPIKEHUNT_BENCH_HOSTS (default 300) hosts for
// SPIKEHUNT_BENCH_HOURS (default 1) of thousand-spikes into the embedded
// engine through the ingest, and reports simulated host-hours per second of
// wall time and the rows inserted per second: what bounds make demo and
// make eval.
func BenchmarkLoad(b *testing.B) {
	hosts, hours := envInt("SPIKEHUNT_BENCH_HOSTS", 300), envInt("SPIKEHUNT_BENCH_HOURS", 1)
	ctx := context.Background()
	st := testenv.ClickHouse(b)
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		began := time.Now()
		_, stats, err := Load(ctx, st, Config{Scenario: ThousandSpikes, Hosts: hosts, Duration: time.Duration(hours) * time.Hour, Start: epoch, Seed: uint64(i)}, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		wall := time.Since(began).Seconds()
		b.ReportMetric(float64(hosts*hours)/wall, "sim.host_hours_per_s:host-h/s")
		b.ReportMetric(float64(stats.Kept+stats.Points)/wall, "sim.rows_per_s:rows/s")
		b.ReportMetric(float64(stats.Kept), "sim.requests_rows")
		b.ReportMetric(float64(stats.Points), "sim.counter_rows")
	}
}

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}
