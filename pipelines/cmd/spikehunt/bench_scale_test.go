package main

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
)

// BenchmarkScaleIngest is `make bench-scale`'s ingest stage at one fleet
// size: SPIKEHUNT_BENCH_HOSTS hosts (default 1,000) sending 1,000 agent
// spans each, from a real broker, drained by one `spikehunt ingest` into
// the embedded engine (measureIngest). It reports the wall time from the
// ingest being ready to the group having committed everything, the CPU
// time of the ingest process, and its peak resident memory (VmHWM of that
// process, which is new for the run: the embedded engine's inserts and
// merges are inside it). One size per process, so that tests/growth's fit
// over the sizes (tests/scalereport) compares like with like.
func BenchmarkScaleIngest(b *testing.B) {
	hosts := 1000
	if v, err := strconv.Atoi(os.Getenv("SPIKEHUNT_BENCH_HOSTS")); err == nil && v > 0 {
		hosts = v
	}
	scaleIngest.Do(func() { scaleIngest.r, scaleIngest.err = measureIngest(b, hosts*1000, hosts) })
	if scaleIngest.err != nil {
		b.Fatal(scaleIngest.err)
	}
	r := scaleIngest.r
	b.ReportMetric(r.wall, fmt.Sprintf("scale.ingest_s_%d:s", hosts))
	b.ReportMetric(r.cpu, fmt.Sprintf("scale.ingest_cpu_s_%d:s", hosts))
	b.ReportMetric(r.peakRSS, fmt.Sprintf("scale.ingest_peak_mib_%d:MiB", hosts))
	b.ReportMetric(r.wallRate, fmt.Sprintf("scale.ingest_spans_per_s_%d:spans/s", hosts))
	// The ingest's wall time at these loads is partly its batches' delay
	// (a batch not full waits --batch.delay, or --batch.catch-up-delay
	// while its partition is behind): the batch sizes say which.
	b.ReportMetric(r.perInsert, fmt.Sprintf("scale.ingest_rows_per_insert_%d:rows", hosts))
}

// scaleIngest measures once, whatever b.N is.
var scaleIngest struct {
	sync.Once
	r   ingestFigures
	err error
}
