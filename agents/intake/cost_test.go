package intake

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/protobuf/encoding/protowire"
)

// msg encodes a message from (field, payload) pairs, every field
// length-delimited.
func msg(fields ...any) []byte {
	var b []byte
	for i := 0; i < len(fields); i += 2 {
		b = protowire.AppendTag(b, protowire.Number(fields[i].(int)), protowire.BytesType)
		p, _ := fields[i+1].([]byte)
		b = protowire.AppendBytes(b, p)
	}
	return b
}

// repeated is field f holding payload n times.
func repeated(f int, payload []byte, n int) []byte {
	one := msg(f, payload)
	return bytes.Repeat(one, n)
}

// inSpan wraps span fields into a request of one span.
func inSpan(span []byte) []byte { return msg(1, msg(2, msg(2, span))) }

// emptySpans is the gzip bomb, decompressed: a request of n empty
// spans, 2 bytes each.
func emptySpans(n int) []byte { return msg(1, msg(2, repeated(2, nil, n))) }

// nestedValue is an attribute value of arrays in arrays, depth deep.
func nestedValue(depth int) []byte {
	v := []byte{}
	for range depth {
		v = msg(5, msg(1, v)) // AnyValue{array_value: ArrayValue{values: [v]}}
	}
	return v
}

// nestedArrays is a request of one span with a nestedValue attribute.
func nestedArrays(depth int) []byte {
	return inSpan(msg(9, msg(1, []byte("k"), 2, nestedValue(depth))))
}

// costShapes are requests built to make decoding expensive per wire byte.
func costShapes() map[string][]byte {
	const n = 20000
	real, _ := ptraceotlp.NewExportRequestFromTraces(manySpans(2000)).MarshalProto()
	return map[string][]byte{
		"empty spans":                      emptySpans(n),
		"empty resource spans":             repeated(1, nil, n),
		"empty scope spans":                msg(1, repeated(2, nil, n)),
		"empty span attributes":            inSpan(repeated(9, nil, n)),
		"empty string attributes":          inSpan(repeated(9, msg(2, msg(1, nil)), n)),
		"one-byte string attributes":       inSpan(repeated(9, msg(1, []byte("k"), 2, msg(1, []byte("v"))), n)),
		"empty events":                     inSpan(repeated(11, nil, n)),
		"empty links":                      inSpan(repeated(13, nil, n)),
		"empty event attributes":           inSpan(msg(11, repeated(3, nil, n))),
		"empty resource attributes":        msg(1, msg(1, repeated(1, nil, n))),
		"empty entity refs":                msg(1, msg(1, repeated(3, nil, n))),
		"entity ref keys":                  msg(1, msg(1, msg(3, repeated(3, []byte("k"), n)))),
		"empty scope attributes":           msg(1, msg(2, msg(1, repeated(3, nil, n)))),
		"array of empty values":            inSpan(msg(9, msg(2, msg(5, repeated(1, nil, n))))),
		"map of empty pairs":               inSpan(msg(9, msg(2, msg(6, repeated(1, nil, n))))),
		"span names repeated":              msg(1, msg(2, repeated(2, msg(5, []byte("n")), n))),
		"arrays nested 25 deep, many":      msg(1, msg(2, repeated(2, msg(9, msg(2, nestedValue(25))), 500))),
		"2,000 spans of a real SDK":        real,
		"string values of 1 KiB":           inSpan(repeated(9, msg(1, []byte("k"), 2, msg(1, bytes.Repeat([]byte("v"), 1024))), 500)),
		"a trace state repeated per span":  msg(1, msg(2, repeated(2, repeated(3, []byte("x"), 8), n/8))),
		"empty statuses":                   msg(1, msg(2, repeated(2, msg(15, nil), n))),
		"empty resource spans and scopes":  repeated(1, msg(1, nil, 2, nil), n/2),
		"empty instrumentation scopes":     msg(1, repeated(2, msg(1, nil), n)),
		"bytes values":                     inSpan(repeated(9, msg(2, msg(7, []byte("b"))), n)),
		"an int value set 20,000 times":    inSpan(msg(9, msg(2, bytes.Repeat([]byte{0x18, 0x01}, n)))),
		"deprecated scope spans":           msg(1, repeated(1000, msg(2, nil), n)),
		"maps of one pair nested in pairs": inSpan(repeated(9, msg(2, msg(6, msg(1, msg(2, msg(6, nil))))), n/2)),
	}
}

// manySpans is n request spans with the attributes an HTTP server's SDK
// sets.
func manySpans(n int) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "checkout")
	rs.Resource().Attributes().PutStr("host.name", "node-17")
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp")
	for i := range n {
		s := ss.Spans().AppendEmpty()
		s.SetName("POST /pay")
		s.SetKind(ptrace.SpanKindServer)
		s.SetTraceID(traceA)
		s.SetSpanID([8]byte{byte(i), byte(i >> 8), 1})
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(t0))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(t0.Add(time.Duration(i+1) * time.Microsecond)))
		a := s.Attributes()
		a.PutStr("http.route", "/pay")
		a.PutInt("http.response.status_code", 200)
		a.PutStr("url.path", "/pay/"+strings.Repeat("x", i%32))
		a.PutStr("user_agent.original", "Go-http-client/1.1")
	}
	return td
}

// allocated is the bytes f allocates, as the runtime counts them.
func allocated(f func()) int64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return int64(after.TotalAlloc - before.TotalAlloc)
}

func TestDecodeCostBoundsWhatDecodingAllocates(t *testing.T) {
	for name, body := range costShapes() {
		t.Run(name, func(t *testing.T) {
			shape, err := scanTraceRequest(body)
			if err != nil {
				t.Fatalf("scan: %v", err)
			}
			var decodeErr error
			got := allocated(func() {
				req := ptraceotlp.NewExportRequest()
				decodeErr = req.UnmarshalProto(body)
				runtime.KeepAlive(req)
			})
			if decodeErr != nil {
				t.Fatalf("pdata refuses the shape: %v", decodeErr)
			}
			t.Logf("%d wire bytes, estimate %d, allocated %d (%.2f of the estimate)", len(body), shape.cost, got, float64(got)/float64(shape.cost))
			if got > shape.cost {
				t.Errorf("decoding allocated %d bytes, more than the estimate %d", got, shape.cost)
			}
			// The estimate must not refuse real traffic: within 8× of the truth.
			if shape.cost > 8*max(got, int64(len(body))) {
				t.Errorf("estimate %d is more than 8× the %d bytes decoding allocated", shape.cost, got)
			}

			js, err := decodeToJSON(body)
			if err != nil {
				t.Fatal(err)
			}
			var jsErr error
			gotJSON := allocated(func() {
				req := ptraceotlp.NewExportRequest()
				jsErr = req.UnmarshalJSON(js)
				runtime.KeepAlive(req)
			})
			if jsErr != nil {
				t.Fatalf("pdata refuses its own JSON: %v", jsErr)
			}
			if est, _ := jsonDecodeCost(js); gotJSON > est {
				t.Errorf("JSON (%d bytes): decoding allocated %d bytes, more than the estimate %d", len(js), gotJSON, est)
			}
		})
	}
}

func decodeToJSON(pb []byte) ([]byte, error) {
	req := ptraceotlp.NewExportRequest()
	if err := req.UnmarshalProto(pb); err != nil {
		return nil, err
	}
	return req.MarshalJSON()
}

func TestScanTraceRequest(t *testing.T) {
	t.Run("counts spans of every resource and scope", func(t *testing.T) {
		body := append(emptySpans(3), msg(1, msg(2, repeated(2, nil, 4), 2, repeated(2, nil, 5)))...)
		s, err := scanTraceRequest(body)
		if err != nil || s.spans != 12 {
			t.Errorf("spans = %d, %v; want 12", s.spans, err)
		}
	})
	t.Run("counts the spans of deprecated instrumentation_library_spans", func(t *testing.T) {
		s, err := scanTraceRequest(msg(1, msg(1000, repeated(2, nil, 7))))
		if err != nil || s.spans != 7 {
			t.Errorf("spans = %d, %v; want 7", s.spans, err)
		}
	})
	t.Run("refuses nesting deeper than maxProtoDepth", func(t *testing.T) {
		if _, err := scanTraceRequest(nestedArrays(25)); err != nil {
			t.Errorf("25 levels of arrays: %v", err)
		}
		if _, err := scanTraceRequest(nestedArrays(40)); !errors.Is(err, errTooDeep) {
			t.Errorf("40 levels of arrays: %v, want errTooDeep", err)
		}
	})
	t.Run("refuses JSON nested deeper than maxJSONDepth", func(t *testing.T) {
		deep := func(d int) []byte {
			v := strings.Repeat(`{"arrayValue":{"values":[`, d) + `{"stringValue":"[[[{{{\"}"}` + strings.Repeat(`]}}`, d)
			return []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"attributes":[{"key":"k","value":` + v + `}]}]}]}]}`)
		}
		if _, err := jsonDecodeCost(deep(30)); err != nil {
			t.Errorf("30 levels: %v", err)
		}
		if _, err := jsonDecodeCost(deep(50)); !errors.Is(err, errTooDeep) {
			t.Errorf("50 levels: %v, want errTooDeep", err)
		}
	})
	t.Run("refuses a truncated field", func(t *testing.T) {
		if _, err := scanTraceRequest([]byte{0x0a, 0x05, 0x12}); err == nil {
			t.Error("no error")
		}
	})
}
