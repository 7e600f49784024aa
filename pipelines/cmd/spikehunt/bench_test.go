package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/pipelines/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// BenchmarkIngest fills a topic with SPIKEHUNT_BENCH_SPANS (default
// 5,000,000) agent spans from 300 hosts, runs one `spikehunt ingest` into
// the embedded engine until the group has committed everything, and
// reports rows per CPU second of the ingest process (the embedded engine's
// inserts and merges included: it runs inside that process) and the
// compressed bytes on disk per requests row after OPTIMIZE … FINAL. It
// measures once, whatever b.N is.
func BenchmarkIngest(b *testing.B) {
	ingestBench.Do(func() { ingestBench.r, ingestBench.err = measureIngest(b) })
	if ingestBench.err != nil {
		b.Fatal(ingestBench.err)
	}
	r := ingestBench.r
	b.ReportMetric(r.perCore, "ingest.spans_per_s_per_core:rows/s")
	b.ReportMetric(r.wallRate, "ingest.spans_per_s_wall:rows/s")
	b.ReportMetric(r.bytesPerRow, "ingest.stored_bytes_per_request:B")
}

var ingestBench struct {
	sync.Once
	r   ingestFigures
	err error
}

type ingestFigures struct{ perCore, wallRate, bytesPerRow float64 }

func measureIngest(b *testing.B) (ingestFigures, error) {
	spans := 5_000_000
	if v, err := strconv.Atoi(os.Getenv("SPIKEHUNT_BENCH_SPANS")); err == nil && v > 0 {
		spans = v
	}
	k := testenv.SharedKafka(b)
	ctx := context.Background()
	topic, group := "bench-spans", "bench"
	for _, tp := range []string{topic, topic + "-metrics", topic + "-dlq"} {
		if err := k.CreateTopic(ctx, tp, 12); err != nil {
			return ingestFigures{}, err
		}
	}
	b.Logf("producing %d spans from 300 hosts", spans)
	produceRequests(b, k, topic, spans)

	dir := b.TempDir()
	dsn := "chdb://" + dir + "?database=bench"
	p := startIngest(b, []string{"ingest", "--dsn", dsn, "--migrate", "--listen", "",
		"--kafka.brokers", k.Brokers()[0], "--group", group,
		"--topic.spans", topic, "--topic.metrics", topic + "-metrics", "--topic.dlq", topic + "-dlq"}, false, 0)
	start := time.Now()
	user0, sys0 := testenv.ProcCPU(p.cmd.Process.Pid)
	waitLagZero(b, k, group, topic)
	user1, sys1 := testenv.ProcCPU(p.cmd.Process.Pid)
	cpu := user1 + sys1 - user0 - sys0
	wall := time.Since(start).Seconds()
	p.cmd.Process.Signal(os.Interrupt)
	p.wait(b, 30*time.Second)

	st, err := store.Open(ctx, dsn)
	if err != nil {
		return ingestFigures{}, err
	}
	defer st.Close()
	if err := st.Exec(ctx, "OPTIMIZE TABLE requests FINAL"); err != nil {
		return ingestFigures{}, err
	}
	tab, err := store.Select(ctx, st, "SELECT sum(rows), sum(data_compressed_bytes) FROM system.parts WHERE database = currentDatabase() AND table = 'requests' AND active")
	if err != nil {
		return ingestFigures{}, err
	}
	rows, _ := strconv.ParseFloat(tab.Rows[0][0], 64)
	bytes, _ := strconv.ParseFloat(tab.Rows[0][1], 64)
	if int(rows) != spans {
		return ingestFigures{}, fmt.Errorf("requests has %.0f rows, want %d", rows, spans)
	}
	return ingestFigures{perCore: rows / cpu, wallRate: rows / wall, bytesPerRow: bytes / rows}, nil
}
