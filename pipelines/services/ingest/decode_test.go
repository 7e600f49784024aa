package ingest

import (
	"strings"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	protobuf "google.golang.org/protobuf/proto"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

func TestDecodeErrorNamesReasonAndDetail(t *testing.T) {
	err := error(&DecodeError{Reason: "span", Detail: `span 3 of service "billy": end before start`})
	if got, want := err.Error(), `ingest: message rejected (span): span 3 of service "billy": end before start`; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

func TestBytesThatAreNoOTLPRequestAreRejectedAsProtobuf(t *testing.T) {
	spans := fixtureSpansMsg(t, fixtureResource, fixtureRequests())
	points := fixturePointsMsg(t, fixtureResource, fixturePoints())
	for _, tc := range []struct {
		name string
		msg  []byte
	}{
		{"JSON", []byte(`{"resourceSpans":[]}`)},
		{"a varint that never ends", []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{"truncated spans", spans[:len(spans)/2]},
		{"truncated points", points[:len(points)/2]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRequestRows()
			rows, skipped, err := r.AppendTraces(tc.msg)
			decodeErr(t, err, "protobuf", "ExportTraceServiceRequest", "otlp_proto")
			if rows != 0 || skipped != 0 || r.Rows() != 0 {
				t.Errorf("AppendTraces = %d rows, %d skipped; batch %d rows; want all 0", rows, skipped, r.Rows())
			}
			c := NewCounterRows()
			rows, err = c.AppendMetrics(tc.msg)
			decodeErr(t, err, "protobuf", "ExportMetricsServiceRequest", "otlp_proto")
			if rows != 0 || c.Rows() != 0 {
				t.Errorf("AppendMetrics = %d rows; batch %d rows; want 0", rows, c.Rows())
			}
		})
	}
}

// Valid protobuf that breaks an OTLP rule pdata enforces.
func TestATraceIDOfThreeBytesIsRejectedAsProtobuf(t *testing.T) {
	msg, err := protobuf.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{
			TraceId: []byte{1, 2, 3}, Name: "GET /x", Kind: tracepb.Span_SPAN_KIND_SERVER,
			StartTimeUnixNano: uint64(fixtureEpoch.UnixNano()), EndTimeUnixNano: uint64(fixtureEpoch.UnixNano()) + 1000,
		}}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	r := NewRequestRows()
	_, _, err = r.AppendTraces(msg)
	decodeErr(t, err, "protobuf", "ExportTraceServiceRequest")
	if r.Rows() != 0 {
		t.Errorf("batch has %d rows, want 0", r.Rows())
	}
}

// The wrong signal on a topic: both requests share the outer layout
// (resource, scope, list), so only what lies inside tells them apart.
func TestAMessageOfTheOtherSignalIsRejected(t *testing.T) {
	gauges := []telemetry.Point{fixturePoints()[8]}
	for name, msg := range map[string][]byte{
		"agent counters":    fixturePointsMsg(t, fixtureResource, fixturePoints()),
		"agent gauges only": fixturePointsMsg(t, fixtureResource, gauges),
		"a gauge with 16-byte name": fixturePointsMsg(t, fixtureResource, []telemetry.Point{{
			Metric: "sixteen.bytes.ab", Start: fixtureEpoch, End: fixtureEpoch, Value: 1}}),
	} {
		r := NewRequestRows()
		rows, _, err := r.AppendTraces(msg)
		if err == nil || rows != 0 || r.Rows() != 0 {
			t.Errorf("%s on the spans topic: %d rows, error %v; want a rejection", name, rows, err)
			continue
		}
		t.Logf("%s on the spans topic: %v", name, err)
	}

	c := NewCounterRows()
	rows, err := c.AppendMetrics(fixtureSpansMsg(t, fixtureResource, fixtureRequests()))
	if err == nil || rows != 0 || c.Rows() != 0 {
		t.Fatalf("agent spans on the metrics topic: %d rows, error %v; want a rejection", rows, err)
	}
	t.Logf("agent spans on the metrics topic: %v", err)
}

func TestAnEmptyRequestIsNoRowsAndNoError(t *testing.T) {
	r := NewRequestRows()
	if rows, skipped, err := r.AppendTraces(nil); rows != 0 || skipped != 0 || err != nil {
		t.Errorf("AppendTraces(nil) = %d, %d, %v; want 0, 0, nil", rows, skipped, err)
	}
	c := NewCounterRows()
	if rows, err := c.AppendMetrics(nil); rows != 0 || err != nil {
		t.Errorf("AppendMetrics(nil) = %d, %v; want 0, nil", rows, err)
	}
}

func TestAPanicInTheDecoderBecomesARejection(t *testing.T) {
	err := func() (err error) {
		defer recoverProtobuf("ExportTraceServiceRequest", &err)
		panic("index out of range [7] with length 3")
	}()
	decodeErr(t, err, "protobuf", "index out of range", "decoder bug")
	if !strings.Contains(err.Error(), "ExportTraceServiceRequest") {
		t.Errorf("%v does not name the message type", err)
	}
}
