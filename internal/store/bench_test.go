package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
)

// BenchmarkEmbeddedInsert measures requests-shaped rows from Go columns in
// 100k-row batches into the embedded engine. Target ≥ 1,000,000 rows/s.
func BenchmarkEmbeddedInsert(b *testing.B) {
	st := embedded(b)
	ctx := context.Background()
	if err := st.Exec(ctx, requestsDDL); err != nil {
		b.Fatal(err)
	}
	batch := newRequestsBatch()
	for i := 0; i < 100_000; i++ {
		batch.add(t0.Add(time.Duration(i)*time.Millisecond), "billy", fmt.Sprintf("h%03d", i%300), "A", "/get", uint32(100+i%977), 1)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := st.Insert(ctx, "requests", batch.input()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100_000)/time.Since(start).Seconds(), "store.embedded.insert_rows_per_s:rows/s")
}

// BenchmarkEmbeddedHostSecondMax measures the detectors' basic query, the
// per-host per-second max for one service, over 10M rows. Target ≤ 500 ms.
func BenchmarkEmbeddedHostSecondMax(b *testing.B) {
	st := embedded(b)
	loadKnownFleet(b, st, 100, 100) // 100 hosts × 100 s × 1000 = 10M rows
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		var n int
		err := st.Query(ctx, `SELECT host, toDateTime(ts) AS s, max(latency_us) FROM requests
			WHERE service = 'billy' GROUP BY host, s SETTINGS optimize_aggregation_in_order = 1`, func(blk store.Block) error { n += blk.Rows; return nil })
		if err != nil || n != 10_000 {
			b.Fatalf("%d rows, %v", n, err)
		}
	}
	b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(b.N), "store.embedded.host_second_max_ms:ms")
}
