package ingest

import (
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/otlpwire"
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// Rows outside the window are left out one by one; the rest of the
// message is appended, on either table.
func TestTheTimeWindowRefusesRowsNotMessages(t *testing.T) {
	now := t0.Add(time.Hour)
	w := newTimeWindow(now, 7*24*time.Hour, time.Hour)
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)

	reqs := []telemetry.Request{
		{Service: "a", Endpoint: "/", Status: "200", Weight: 1, Start: t0, Duration: time.Millisecond},
		{Service: "a", Endpoint: "/", Status: "200", Weight: 1, Start: old, Duration: time.Millisecond},
		{Service: "a", Endpoint: "/", Status: "200", Weight: 1, Start: now.Add(2 * time.Hour), Duration: time.Millisecond},
		{Service: "a", Endpoint: "/", Status: "200", Weight: 1, Start: t0.Add(time.Second), Duration: time.Millisecond},
	}
	for i := range reqs {
		reqs[i].TraceID[15], reqs[i].SpanID[7] = byte(i+1), byte(i+1)
	}
	msg, err := otlpwire.EncodeSpans(telemetry.Resource{HostName: "h"}, reqs)
	if err != nil {
		t.Fatal(err)
	}
	r := NewRequestRows()
	r.SetWindow(w)
	rows, _, err := r.AppendTraces(msg)
	if err != nil || rows != 2 || r.Refused() != 2 || r.Rows() != 2 {
		t.Errorf("requests: %d rows appended, %d refused, batch %d, %v; want 2, 2, 2", rows, r.Refused(), r.Rows(), err)
	}
	if got := r.ts.Row(1); !got.Equal(t0.Add(time.Second)) {
		t.Errorf("second row at %s, want the fourth span's %s", got, t0.Add(time.Second))
	}

	pts := []telemetry.Point{
		{Metric: "system.cpu.time", Unit: "s", Start: t0, End: t0.Add(time.Second), Value: 1},
		{Metric: "system.cpu.time", Unit: "s", Start: old, End: old.Add(time.Second), Value: 2},
	}
	mmsg, err := otlpwire.EncodeMetrics(telemetry.Resource{HostName: "h"}, pts)
	if err != nil {
		t.Fatal(err)
	}
	c := NewCounterRows()
	c.SetWindow(w)
	if rows, err := c.AppendMetrics(mmsg); err != nil || rows != 1 || c.Refused() != 1 || c.Rows() != 1 {
		t.Errorf("counters: %d rows appended, %d refused, batch %d, %v; want 1, 1, 1", rows, c.Refused(), c.Rows(), err)
	}
	// A message wholly inside leaves Refused at 0.
	inside, err := otlpwire.EncodeMetrics(telemetry.Resource{HostName: "h"}, pts[:1])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AppendMetrics(inside); err != nil || c.Refused() != 0 {
		t.Errorf("a message inside the window: %d refused, %v", c.Refused(), err)
	}
}
