package ingest

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go/proto"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Messages come off Kafka from any producer. Whatever the bytes: no panic;
// a rejection is a *DecodeError with a known Reason and leaves the batch
// as it was; an accepted message adds rows the tables can hold.

var knownReasons = map[string]bool{badProtobuf: true, badTimestamp: true, badSpan: true, badPoint: true}

// fuzzRejection checks err is a proper rejection.
func fuzzRejection(t *testing.T, err error) {
	t.Helper()
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %v (%T) is not a *DecodeError", err, err)
	}
	if !knownReasons[de.Reason] || de.Detail == "" {
		t.Fatalf("rejection with Reason %q, Detail %q", de.Reason, de.Detail)
	}
}

// encodes checks the batch still makes a valid insert block.
func encodes(t *testing.T, in proto.Input) {
	t.Helper()
	var buf proto.Buffer
	if err := (proto.Block{Columns: len(in), Rows: in[0].Data.Rows()}).EncodeRawBlock(&buf, 0, in); err != nil {
		t.Fatalf("the batch no longer encodes: %v", err)
	}
}

// Microsecond bounds of plausible().
var (
	earliestMicros = micros(earliest)
	latestMicros   = micros(latest)
)

func FuzzAppendTraces(f *testing.F) {
	agent := fixtureSpansMsg(f, fixtureResource, fixtureRequests())
	f.Add(agent)
	f.Add(agent[:len(agent)/2])
	f.Add(agent[:len(agent)-1])
	f.Add(fixturePointsMsg(f, fixtureResource, fixturePoints()))
	f.Add(oneSpanMsg(f, func(s ptrace.Span) {
		s.SetKind(ptrace.SpanKindUnspecified)
		s.Attributes().PutStr("http.route", "/users/{id}")
		s.Attributes().PutStr("http.response.status_code", "418")
		s.Attributes().PutInt("spikehunt.weight", 3)
		s.Attributes().PutStr("thread.id", "12")
	}))
	f.Add(oneSpanMsg(f, func(s ptrace.Span) { s.SetParentSpanID(fixtureID[[8]byte](1)) }))
	f.Add([]byte{})
	straddling := fixtureRequests()
	straddling[0].Start = time.Date(2150, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Add(fixtureSpansMsg(f, fixtureResource, straddling))

	// The batch holds a message before the fuzzed one, so that a rejection
	// that leaves a trace in any column shows. Its time window refuses
	// the 22nd century, so that a message part in and part out of it
	// takes the path that filters row by row.
	r := NewRequestRows()
	w := newTimeWindow(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), 100*365*24*time.Hour, time.Nanosecond)
	r.SetWindow(w)
	f.Fuzz(func(t *testing.T, msg []byte) {
		r.Reset()
		if _, _, err := r.AppendTraces(agent); err != nil {
			t.Fatal(err)
		}
		before := r.Rows()
		rows, skipped, err := r.AppendTraces(msg)
		if n := inputRows(t, r.Input()); n != r.Rows() {
			t.Fatalf("Rows() = %d, columns hold %d", r.Rows(), n)
		}
		if err != nil {
			fuzzRejection(t, err)
			if rows != 0 || skipped != 0 || r.Rows() != before {
				t.Fatalf("rejected with %d rows, %d skipped, batch %d → %d rows: %v", rows, skipped, before, r.Rows(), err)
			}
			return
		}
		if r.Rows() != before+rows {
			t.Fatalf("%d rows appended, batch %d → %d", rows, before, r.Rows())
		}
		// Every span of the message is a row or a skip.
		var u ptrace.ProtoUnmarshaler
		td, perr := u.UnmarshalTraces(msg)
		if perr != nil {
			t.Fatalf("accepted a message pdata rejects: %v", perr)
		}
		if rows+skipped+r.Refused() != td.SpanCount() {
			t.Fatalf("%d rows + %d skipped + %d refused, the message has %d spans", rows, skipped, r.Refused(), td.SpanCount())
		}
		in := r.Input()
		ts := inputCol[*proto.ColDateTime64](t, in, "ts")
		weight := inputCol[*proto.ColUInt32](t, in, "weight")
		for i := before; i < r.Rows(); i++ {
			if v := ts.Data[i]; v < earliestMicros || v > latestMicros || !w.holds(v) {
				t.Errorf("row %d: ts %v out of 2000–2200 or the window %s", i, ts.Row(i), w)
			}
			if weight.Row(i) < 1 {
				t.Errorf("row %d: weight 0", i)
			}
			for _, name := range [...]string{"service", "host", "endpoint", "status"} {
				if v := inputCol[stringColumn](t, in, name).Row(i); v == "" || len(v) > MaxValueBytes {
					t.Errorf("row %d: %s of %d bytes, want 1 to MaxValueBytes", i, name, len(v))
				}
			}
		}
		encodes(t, in)
	})
}

func FuzzAppendMetrics(f *testing.F) {
	agent := fixturePointsMsg(f, fixtureResource, fixturePoints())
	f.Add(agent)
	f.Add(agent[:len(agent)/2])
	f.Add(agent[:len(agent)-1])
	f.Add(fixtureSpansMsg(f, fixtureResource, fixtureRequests()))
	f.Add(metricMsg(f, func(ms pmetric.MetricSlice) {
		a := validSum(ms, "many").Attributes()
		for _, k := range [...]string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q"} {
			a.PutStr(k, k)
		}
		a.PutInt("cpu.logical_number", 7)
		a.PutStr("cpu.mode", "user")
		validGauge(ms, "gauge").SetIntValue(3)
		ms.AppendEmpty().SetEmptyHistogram().DataPoints().AppendEmpty()
	}))
	f.Add([]byte{})

	c := NewCounterRows()
	f.Fuzz(func(t *testing.T, msg []byte) {
		c.Reset()
		if _, err := c.AppendMetrics(agent); err != nil {
			t.Fatal(err)
		}
		before := c.Rows()
		rows, err := c.AppendMetrics(msg)
		if n := inputRows(t, c.Input()); n != c.Rows() {
			t.Fatalf("Rows() = %d, columns hold %d", c.Rows(), n)
		}
		if err != nil {
			fuzzRejection(t, err)
			if rows != 0 || c.Rows() != before {
				t.Fatalf("rejected with %d rows, batch %d → %d rows: %v", rows, before, c.Rows(), err)
			}
			return
		}
		if c.Rows() != before+rows {
			t.Fatalf("%d rows appended, batch %d → %d", rows, before, c.Rows())
		}
		var u pmetric.ProtoUnmarshaler
		md, perr := u.UnmarshalMetrics(msg)
		if perr != nil {
			t.Fatalf("accepted a message pdata rejects: %v", perr)
		}
		if want := numberPoints(md); rows != want {
			t.Fatalf("%d rows, the message has %d Sum and Gauge points", rows, want)
		}
		in := c.Input()
		ts := inputCol[*proto.ColDateTime64](t, in, "ts_start")
		cpu := inputCol[*proto.ColInt16](t, in, "cpu")
		value := inputCol[*proto.ColFloat64](t, in, "value")
		host := inputCol[*proto.ColLowCardinality[string]](t, in, "host")
		attrs := inputCol[*proto.ColMap[string, string]](t, in, "attrs")
		for i := before; i < c.Rows(); i++ {
			if v := ts.Data[i]; v < earliestMicros || v > latestMicros {
				t.Errorf("row %d: ts_start %v out of 2000–2200", i, ts.Row(i))
			}
			if cpu.Row(i) < noCPU {
				t.Errorf("row %d: cpu %d", i, cpu.Row(i))
			}
			if v := value.Row(i); math.IsNaN(v) || math.IsInf(v, 0) {
				t.Errorf("row %d: value %v", i, v)
			}
			if host.Row(i) == "" {
				t.Errorf("row %d: empty host", i)
			}
			seen := map[string]bool{}
			row := attrs.RowKV(i)
			if len(row) > MaxPointAttrs {
				t.Errorf("row %d: %d attrs, over MaxPointAttrs", i, len(row))
			}
			for _, kv := range row {
				if seen[kv.Key] || kv.Key == attrCPU {
					t.Errorf("row %d: attrs repeat or hold %q", i, kv.Key)
				}
				if len(kv.Key) > MaxAttrKeyBytes || len(kv.Value) > MaxValueBytes {
					t.Errorf("row %d: attribute of a %d-byte key, %d-byte value, over the limits", i, len(kv.Key), len(kv.Value))
				}
				seen[kv.Key] = true
			}
		}
		encodes(t, in)
	})
}

// numberPoints counts the data points of md's Sums and Gauges.
func numberPoints(md pmetric.Metrics) int {
	n := 0
	for _, rm := range md.ResourceMetrics().All() {
		for _, sm := range rm.ScopeMetrics().All() {
			for _, m := range sm.Metrics().All() {
				switch m.Type() {
				case pmetric.MetricTypeSum:
					n += m.Sum().DataPoints().Len()
				case pmetric.MetricTypeGauge:
					n += m.Gauge().DataPoints().Len()
				}
			}
		}
	}
	return n
}
