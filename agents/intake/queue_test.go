package intake

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

// serverSpans is n valid server spans of service billy.
func serverSpans(n int) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "billy")
	spans := rs.ScopeSpans().AppendEmpty().Spans()
	for i := range n {
		s := spans.AppendEmpty()
		s.SetName("/search")
		s.SetKind(ptrace.SpanKindServer)
		s.SetTraceID(pcommon.TraceID{byte(i), byte(i >> 8), 1})
		s.SetSpanID(pcommon.SpanID{byte(i), byte(i >> 8), 1})
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(t0))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(t0.Add(time.Millisecond)))
	}
	return td
}

// TestQueueFullDropsAndKeepsAnswering: with nobody reading Out, every
// receiver keeps answering at once and counts what it could not queue.
func TestQueueFullDropsAndKeepsAnswering(t *testing.T) {
	cfg := testConfig(t)
	cfg.QueueSize = 10
	in := startIntake(t, cfg)
	addrs := in.Addrs()

	var lines []string
	for i := range 100 {
		lines = append(lines, fmt.Sprintf("billy /search %d 200", i+1))
	}
	sendDatagram(t, "unixgram", addrs.LineUnix, []byte(strings.Join(lines, "\n")))
	waitFor(t, 5*time.Second, "100 lines", func() bool { return received(in, SourceUnixgram) == 100 })
	if got := drops(in, SourceUnixgram, "queue_full"); got != 90 {
		t.Errorf("drops{unixgram, queue_full} = %v, want 90", got)
	}
	if got := testutil.ToFloat64(in.m.queueLen); got != 10 {
		t.Errorf("queue_length = %v, want 10", got)
	}

	body, _ := ptraceotlp.NewExportRequestFromTraces(serverSpans(50)).MarshalProto()
	url := "http://" + addrs.OTLPHTTP + "/v1/traces"
	grpcClient := ptraceotlp.NewGRPCClient(dialGRPC(t, addrs.OTLPGRPC))
	start := time.Now()
	for range 20 {
		if code, msg := post(t, url, "application/x-protobuf", "", body); code != http.StatusOK {
			t.Fatalf("HTTP export with a full queue: status %d %q", code, msg)
		}
		if _, err := grpcClient.Export(t.Context(), ptraceotlp.NewExportRequestFromTraces(serverSpans(50))); err != nil {
			t.Fatalf("gRPC export with a full queue: %v", err)
		}
		sendDatagram(t, "udp", addrs.LineUDP, []byte(strings.Join(lines, "\n")))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("40 exports with a full queue took %s: receivers stall", d)
	}
	for _, src := range []string{SourceOTLPHTTP, SourceOTLPGRPC} {
		if got := drops(in, src, "queue_full"); got != 20*50 {
			t.Errorf("drops{%s, queue_full} = %v, want 1000", src, got)
		}
	}
	waitFor(t, 5*time.Second, "2000 UDP lines", func() bool { return received(in, SourceUDP) == 2000 })
	if got := drops(in, SourceUDP, "queue_full"); got != 2000 {
		t.Errorf("drops{udp, queue_full} = %v, want 2000", got)
	}
	// Drops, which the agent's own figures read, is the counter summed
	// over sources.
	if got, want := in.Drops()["queue_full"], uint64(90+2*20*50+2000); got != want {
		t.Errorf("Drops()[queue_full] = %d, want %d", got, want)
	}

	// Once the consumer catches up, requests flow again.
	collect(t, in, 10, time.Second)
	sendDatagram(t, "udp", addrs.LineUDP, []byte("billy /again 1 200"))
	if r := collect(t, in, 1, 5*time.Second)[0]; r.Endpoint != "/again" {
		t.Errorf("after draining got %+v, want /again", r)
	}
}
