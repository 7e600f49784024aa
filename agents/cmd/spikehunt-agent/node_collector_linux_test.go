package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spikehunt/spikehunt/agents/capture/perf"
	"github.com/spikehunt/spikehunt/internal/capture/control"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// nodeCollectorExample is the Collector config the chart gives clusters
// that already run a Collector DaemonSet.
const nodeCollectorExample = "../../../helm/spikehunt/examples/collector/node-collector-tee.yaml"

// A cluster with a Collector DaemonSet had no way to feed the node's
// agent: the example config tees the request spans to it beside the
// Collector's own pipeline. Run by the Collector built from
// pipelines/services/otel/builder-config.yaml, with the node's IP replaced by
// 127.0.0.1 and the backend by a recording OTLP server: an OTel SDK app
// sends server, client and internal spans to the Collector, and a bare
// OTLP client roots and children of unspecified kind; the backend receives every one of them, the agent receives
// exactly the requests (its intake counts them, and ignores no span,
// since none but requests crossed), and a slow server span fires the
// perf capture armed on the agent, through the trigger that trusts the
// Collector's address.
func TestNodeCollectorExampleTeesRequestSpansToTheAgentBesideItsOwnPipeline(t *testing.T) {
	// The capture fired through the Collector needs perf as root.
	if err := perf.New(perf.Config{}).Check(); err != nil || os.Geteuid() != 0 {
		testenv.RequirePrivileged(t, "perf as root", fmt.Errorf("euid %d, perf: %v", os.Geteuid(), err))
	}
	backend := startOTLPRecorder(t)
	// The agent asks for its token, which the example's exporter sends
	// from the Collector's environment: a span without it would be
	// refused and counted as a drop.
	const token = "0b5e1d4c7a9f2e3d6c8b1a4f7e0d3c6b"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startAgent(t, []string{"127.0.0.1:1"}, t.TempDir(), "--capture.backends", "perf",
		"--intake.trigger.cidrs", "127.0.0.1/32", "--intake.auth.token-file", tokenFile)
	agentGRPC := regexp.MustCompile(`otlp-grpc (\S+)`).FindStringSubmatch(p.out.String())
	if agentGRPC == nil {
		t.Fatalf("no otlp-grpc address in the agent's output:\n%s", p.out.String())
	}
	_, agentPort, _ := net.SplitHostPort(agentGRPC[1])
	waitFor(t, func() bool { _, err := os.Stat(p.capSock); return err == nil })
	if out, err := captureCLI(t, p, "arm", "--id", "bait", "--backend", "perf", "--service", "checkout",
		"--latency", "1s", "--pre", "1s", "--post", "500ms"); err != nil {
		t.Fatalf("arm: %v\n%s", err, out)
	}

	config := testCollectorConfig(t, map[string]string{
		// The receiver on the ports testenv.StartCollector picks.
		"0.0.0.0:4317": "${env:OTLP_GRPC_ENDPOINT}",
		"0.0.0.0:4318": "${env:OTLP_HTTP_ENDPOINT}",
		// The agent's port beside a Collector, on this test's agent.
		"${env:NODE_IP}:14317": "${env:NODE_IP}:" + agentPort,
		// The Collector's own backend.
		"otel-gateway.observability.svc:4317": backend.addr,
		// Its own metrics off, as StartCollector runs the gateway.
		"\nservice:\n": "\nservice:\n  telemetry:\n    metrics:\n      level: none\n",
	})
	collector := testenv.StartCollector(t, config, "NODE_IP=127.0.0.1", "SPIKEHUNT_AGENT_TOKEN="+token)

	// The app: requests (server spans and unspecified-kind roots) with
	// client and internal spans under them, and one slow request.
	ctx := context.Background()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(collector), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName("checkout"))))
	tracer := tp.Tracer("checkout-app")
	span := func(ctx context.Context, name string, kind trace.SpanKind, start time.Time, d time.Duration) context.Context {
		ctx, s := tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithTimestamp(start))
		s.End(trace.WithTimestamp(start.Add(d)))
		return ctx
	}
	t0 := time.Now().Add(-5 * time.Second)
	requests, sent := 0, 0
	for i := range 40 {
		start := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		rctx := span(ctx, "/pay", trace.SpanKindServer, start, 3*time.Millisecond)
		// The children are slow: were they let through, they would be
		// counted as ignored, and a client span would not fire.
		span(rctx, "GET payments", trace.SpanKindClient, start, 2*time.Second)
		span(rctx, "render", trace.SpanKindInternal, start, 1500*time.Millisecond)
		requests, sent = requests+1, sent+3
	}
	span(ctx, "/pay", trace.SpanKindServer, time.Now().Add(-3*time.Second), 2500*time.Millisecond)
	requests, sent = requests+1, sent+1
	// A client span alone, slow, from a service with a bait armed.
	span(ctx, "GET fraud-check", trace.SpanKindClient, time.Now().Add(-4*time.Second), 3*time.Second)
	sent++
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// The Go SDK sends an unspecified kind as internal: an app timing its
	// own handlers with a bare OTLP client sends roots and children of
	// unspecified kind, the roots being requests to the agent.
	n, m := exportUnspecified(t, collector, 6)
	requests, sent = requests+n, sent+n+m

	waitForValue(t, "spans at the Collector's backend", func() float64 { return float64(backend.spans()) }, float64(sent))
	const fromOTLP = `source="otlp_grpc"`
	waitForValue(t, "requests at the agent", func() float64 { return metricSum(t, p, "spikehunt_intake_requests_total", fromOTLP) }, float64(requests))
	if got := metricSum(t, p, "spikehunt_intake_spans_ignored_total", fromOTLP); got != 0 {
		t.Errorf("the agent ignored %v spans: the filter let spans other than requests through", got)
	}
	if got := metricSum(t, p, "spikehunt_intake_drops_total", fromOTLP); got != 0 {
		t.Errorf("the agent dropped %v of the Collector's spans", got)
	}

	// The slow request fired the bait through the local trigger.
	out, err := captureCLI(t, p, "wait", "bait", "--timeout", "20s", "--json")
	if err != nil {
		t.Fatalf("wait: %v\n%s", err, out)
	}
	var st control.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if st.State != control.Collected || st.Cause == nil || st.Cause.Kind != "latency" || st.Cause.Latency != 2500*time.Millisecond {
		t.Fatalf("capture %s cause %+v (%s), want Collected by the 2.5 s server span", st.State, st.Cause, st.Error)
	}
	t.Logf("backend: %d spans; agent: %v requests; the 2.5 s server span fired the capture (fire→dump %v)",
		backend.spans(), metricSum(t, p, "spikehunt_intake_requests_total", fromOTLP), st.FireToDump)
}

// exportUnspecified sends roots spans of unspecified kind, each with a
// slow child of unspecified kind, over a bare OTLP/gRPC client to addr,
// and returns how many roots and children it sent.
func exportUnspecified(t *testing.T, addr string, roots int) (int, int) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "checkout")
	ss := rs.ScopeSpans().AppendEmpty()
	start := time.Now().Add(-2 * time.Second)
	for i := range roots {
		var tid pcommon.TraceID
		tid[0], tid[15] = 0xab, byte(i+1)
		root := ss.Spans().AppendEmpty()
		root.SetTraceID(tid)
		root.SetSpanID(pcommon.SpanID{0xcd, byte(i + 1)})
		root.SetName("/cart")
		root.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
		root.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(4 * time.Millisecond)))
		child := ss.Spans().AppendEmpty()
		child.SetTraceID(tid)
		child.SetSpanID(pcommon.SpanID{0xef, byte(i + 1)})
		child.SetParentSpanID(root.SpanID())
		child.SetName("cart-lookup")
		child.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
		child.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(1500 * time.Millisecond)))
	}
	if _, err := ptraceotlp.NewGRPCClient(conn).Export(context.Background(), ptraceotlp.NewExportRequestFromTraces(td)); err != nil {
		t.Fatal(err)
	}
	return roots, roots
}

// testCollectorConfig is the example with each of edits applied exactly
// once (a missing one means the example changed under the test), written
// to the test's folder.
func testCollectorConfig(t *testing.T, edits map[string]string) string {
	t.Helper()
	raw, err := os.ReadFile(nodeCollectorExample)
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	for from, to := range edits {
		if n := strings.Count(s, from); n != 1 {
			t.Fatalf("%s holds %q %d times, want once", nodeCollectorExample, from, n)
		}
		s = strings.Replace(s, from, to, 1)
	}
	path := filepath.Join(t.TempDir(), "collector.yaml")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// otlpRecorder is the other side of the Collector's own pipeline: an OTLP
// gRPC server that counts the spans it is sent.
type otlpRecorder struct {
	ptraceotlp.UnimplementedGRPCServer
	addr string
	mu   sync.Mutex
	n    int
}

func (r *otlpRecorder) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	r.mu.Lock()
	r.n += req.Traces().SpanCount()
	r.mu.Unlock()
	return ptraceotlp.NewExportResponse(), nil
}

func (r *otlpRecorder) spans() int { r.mu.Lock(); defer r.mu.Unlock(); return r.n }

func startOTLPRecorder(t *testing.T) *otlpRecorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpRecorder{addr: ln.Addr().String()}
	g := grpc.NewServer()
	ptraceotlp.RegisterGRPCServer(g, r)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return r
}

// metricSum sums the agent's series of the metric name whose labels hold
// label (`source="otlp_grpc"`).
func metricSum(t *testing.T, p *agentProc, name, label string) float64 {
	t.Helper()
	m := regexp.MustCompile(`metrics http://(\S+)/metrics`).FindStringSubmatch(p.out.String())
	if m == nil {
		t.Fatal("no metrics address in the agent's output")
	}
	resp, err := http.Get("http://" + m[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name+"{") && strings.Contains(l, label) {
			f, _ := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
			sum += f
		}
	}
	return sum
}

// waitForValue waits up to 15 s for get to reach want, and fails if it
// stops short or goes past it.
func waitForValue(t *testing.T, what string, get func() float64, want float64) {
	t.Helper()
	var got float64
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got = get(); got >= want {
			break
		}
	}
	// Anything still in flight would arrive within the Collector's batch
	// timeout (200 ms): look again after it.
	time.Sleep(500 * time.Millisecond)
	if got = get(); got != want {
		t.Fatalf("%s: %v, want %v", what, got, want)
	}
}
