package ingest

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/otlpwire"
	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// A sibling of the poison-batch fault, tried: a batch whose cardinality is
// as high as its row count (every request from another host, service
// and endpoint) is one block of LowCardinality dictionaries as large as
// the batch; ClickHouse takes it, so no such batch stalls a partition.
func TestABatchWithAHostPerRowIsInserted(t *testing.T) {
	const n = 50_000
	st := testenv.ClickHouse(t)
	ctx := context.Background()
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	rows := NewRequestRows()
	rows.SetWindow(newTimeWindow(t0.Add(time.Hour), 7*24*time.Hour, time.Hour))
	for i := range n {
		r := telemetry.Request{Service: fmt.Sprintf("svc-%d", i), Endpoint: fmt.Sprintf("/e/%d", i), Status: "200", Weight: 1,
			Start: t0.Add(time.Duration(i) * time.Microsecond), Duration: time.Millisecond}
		binary.BigEndian.PutUint64(r.TraceID[8:], uint64(i))
		binary.BigEndian.PutUint64(r.SpanID[:], uint64(i))
		host := fmt.Sprintf("host-%06d", i)
		msg, err := otlpwire.EncodeSpans(telemetry.Resource{HostName: host, NodeName: host}, []telemetry.Request{r})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := rows.AppendTraces(msg); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Insert(ctx, "requests", rows.Input()); err != nil {
		t.Fatalf("a batch of %d hosts: %v", n, err)
	}
	tab, err := selectStrings(ctx, st, "SELECT count(), uniqExact(host), uniqExact(service), uniqExact(endpoint) FROM requests")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%d %d %d %d", n, n, n, n); tab != want {
		t.Errorf("requests: %s, want %s", tab, want)
	}
}
