package ingest

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spikehunt/spikehunt/internal/otlpwire"
	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// benchPartitionMsgs is one Kafka partition's share of BenchmarkIngest's
// load (pipelines/cmd/spikehunt): msgs agent messages of 1,000 spans, the
// partition's 25 of 300 hosts taking turns, 1 µs apart.
func benchPartitionMsgs(b testing.TB, t0 time.Time, msgs int) [][]byte {
	b.Helper()
	out := make([][]byte, msgs)
	reqs := make([]telemetry.Request, 1000)
	for m := range out {
		host := fmt.Sprintf("node-%03d", (m*12)%300)
		for i := range reqs {
			id := m*len(reqs) + i
			r := &reqs[i]
			r.Service, r.Endpoint, r.Status, r.Weight = "billy", "/v1/item", "200", 10
			r.Start, r.Duration = t0.Add(time.Duration(id)*time.Microsecond), time.Duration(500+id%4000)*time.Microsecond
			binary.BigEndian.PutUint64(r.TraceID[:8], uint64(id)*0x9e3779b97f4a7c15)
			binary.BigEndian.PutUint64(r.TraceID[8:], uint64(id)*0xbf58476d1ce4e5b9)
			binary.BigEndian.PutUint64(r.SpanID[:], uint64(id)*0x94d049bb133111eb)
		}
		msg, err := otlpwire.EncodeSpans(telemetry.Resource{HostName: host, HWClass: "gen5"}, reqs)
		if err != nil {
			b.Fatal(err)
		}
		out[m] = msg
	}
	return out
}

// processCPU is the CPU time of the whole process, every thread of the
// embedded engine included.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkInsertRequests splits what a batch of requests costs the ingest
// process, in CPU time of the whole process per row (cpu-ns/row):
// decoding its messages, then inserting it, as 100,000 or 300,000 rows,
// into the requests table with its latency_1s view, into the table
// alone, and into a Null table (the block's encoding and parsing only).
// Background merges are stopped: they would land in whichever
// measurement runs; BenchmarkIngest counts them.
func BenchmarkInsertRequests(b *testing.B) {
	ctx := context.Background()
	st := testenv.ClickHouse(b)
	if _, err := schema.Apply(ctx, st, schema.Options{Database: st.Database()}); err != nil {
		b.Fatal(err)
	}
	for _, q := range []string{
		"CREATE TABLE requests_bare AS requests",
		"CREATE TABLE requests_null AS requests ENGINE = Null",
		"SYSTEM STOP MERGES",
	} {
		if err := st.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	msgs := benchPartitionMsgs(b, time.Now().Add(-time.Minute), 300)
	r := NewRequestRows()
	fill := func(n int) {
		r.Reset()
		for _, m := range msgs[:n/1000] {
			if _, _, err := r.AppendTraces(m); err != nil {
				b.Fatal(err)
			}
		}
	}
	report := func(b *testing.B, cpu time.Duration, rows int) {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*rows), "cpu-ns/row")
	}
	b.Run("decode", func(b *testing.B) {
		cpu0 := processCPU()
		for b.Loop() {
			fill(100_000)
		}
		report(b, processCPU()-cpu0, 100_000)
	})
	// As the ingester decodes: every row checked against its time window.
	b.Run("decode-windowed", func(b *testing.B) {
		r.SetWindow(newTimeWindow(time.Now(), 7*24*time.Hour, time.Hour))
		defer r.SetWindow(timeWindow{})
		cpu0 := processCPU()
		for b.Loop() {
			fill(100_000)
		}
		report(b, processCPU()-cpu0, 100_000)
	})
	seq := 0
	for _, rows := range []int{100_000, 300_000} {
		fill(rows)
		for _, table := range []string{"requests", "requests_bare", "requests_null"} {
			b.Run(fmt.Sprintf("%s/rows=%d", table, rows), func(b *testing.B) {
				cpu0 := processCPU()
				for b.Loop() {
					seq++
					tok := store.WithSetting("insert_deduplication_token", fmt.Sprintf("bench/%d", seq))
					if err := st.Insert(ctx, table, r.Input(), tok); err != nil {
						b.Fatal(err)
					}
				}
				report(b, processCPU()-cpu0, rows)
			})
		}
	}
}

// BenchmarkAHundredOffenders is how long a batch of 500 messages, 100
// of which span 120 days each, takes from its first insert to its commit,
// the 40,000 good rows inserted and the 100 dead-lettered: refused by the
// time window (window), or, with the window opened, by ClickHouse (code
// 252) and found by splitting the batch (split). Run it with
// -benchtime 1x.
func BenchmarkAHundredOffenders(b *testing.B) {
	ctx := context.Background()
	st := testenv.ClickHouse(b)
	if _, err := schema.Apply(ctx, st, schema.Options{Database: st.Database()}); err != nil {
		b.Fatal(err)
	}
	var msgs [][]byte
	for m := range 500 {
		if m%5 == 2 {
			msgs = append(msgs, centurySpans(b, "node-1", 0, 100_000+m))
		} else {
			msgs = append(msgs, agentSpans(b, "node-1", 100, m*100))
		}
	}
	run := 0
	for _, tc := range []struct {
		name   string
		maxAge time.Duration
	}{{"window", 0}, {"split", -1}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				run++
				src := NewMemorySource(1)
				for _, m := range msgs {
					src.Produce(DefaultSpansTopic, []byte("node-1"), m)
				}
				cfg := Config{Group: fmt.Sprintf("offenders-%d-%d", time.Now().UnixNano(), run), MaxRows: 1_000_000, MaxDelay: 100 * time.Millisecond,
					MaxAge: tc.maxAge, MaxAhead: tc.maxAge, Now: func() time.Time { return t0.Add(time.Hour) }}
				in, err := NewWithMemory(cfg, st, src, slog.New(slog.DiscardHandler))
				if err != nil {
					b.Fatal(err)
				}
				rctx, cancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				start := time.Now()
				go func() { done <- in.Run(rctx) }()
				for src.Lag() != 0 {
					time.Sleep(5 * time.Millisecond)
				}
				elapsed := time.Since(start)
				cancel()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				if n := len(src.DeadLetters()); n != 100 {
					b.Fatalf("%d dead letters, want 100", n)
				}
				b.ReportMetric(elapsed.Seconds(), "ingest.hundred_offenders_"+tc.name+"_s:s")
				b.ReportMetric(testutil.ToFloat64(in.m.splits.WithLabelValues("requests")), "splits/batch")
			}
		})
	}
}
