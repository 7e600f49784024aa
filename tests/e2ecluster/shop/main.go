//go:build linux

// Command shop is the cluster e2e's app: an HTTP service that loads itself
// with fast requests and stalls for a second when asked, and reports every
// request as an OTLP span to its node's spikehunt agent, the way an app
// instrumented with an OpenTelemetry SDK would.
//
// The app itself is tests/shopapp's, as operator/e2e runs it in process.
//
// It runs in a pod of the image tests/e2ecluster builds; the test reaches
// /stall on the pod's IP.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/spikehunt/spikehunt/tests/shopapp"
)

func main() {
	listen := flag.String("listen", ":8080", "the address the app serves on")
	endpoint := flag.String("otlp-endpoint", os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"),
		"the agent's OTLP/HTTP endpoint, e.g. http://$(HOST_IP):4318 (default: $OTEL_EXPORTER_OTLP_ENDPOINT)")
	service := flag.String("service", "shop", "service.name of the app's spans")
	rate := flag.Int("rate", 200, "fast requests per second the app sends itself")
	stall := flag.Duration("stall", time.Second, "how long a /stall request sleeps holding the lock")
	flush := flag.Duration("flush", 250*time.Millisecond, "how often spans are sent to the agent")
	flag.Parse()
	if *endpoint == "" {
		log.Fatal("shop: no OTLP endpoint: set -otlp-endpoint or OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	if *rate < 1 || *rate > 5000 {
		log.Fatalf("shop: -rate %d is outside [1, 5000]", *rate)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("shop: %v", err)
	}
	headers, err := otlpHeaders(os.Getenv("OTEL_EXPORTER_OTLP_HEADERS"))
	if err != nil {
		log.Fatalf("shop: OTEL_EXPORTER_OTLP_HEADERS: %v", err)
	}
	exp := &exporter{url: strings.TrimSuffix(*endpoint, "/") + "/v1/traces", service: *service, headers: headers,
		client: &http.Client{Timeout: 10 * time.Second}}
	app := &shopapp.App{StallFor: *stall, Served: func(q shopapp.Request) {
		exp.add(span{route: q.Path, start: q.Start, end: q.End, tid: int(q.ThreadID)})
	}}
	srv := &http.Server{Handler: app, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	go exp.run(ctx, *flush)
	self := "http://127.0.0.1:" + portOf(ln.Addr())
	log.Printf("shop: serving on %s, %d requests/s to itself, spans to %s", ln.Addr(), *rate, exp.url)
	shopapp.Load(ctx, self, *rate)
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(shutdown)
	exp.send(shutdown)
}

func portOf(a net.Addr) string {
	_, port, _ := net.SplitHostPort(a.String())
	return port
}

type span struct {
	route      string
	start, end time.Time
	tid        int
}

// maxPending bounds the spans held while the agent does not answer: the
// oldest are dropped beyond it, and counted.
const maxPending = 100_000

// exporter batches spans and posts them as OTLP/HTTP protobuf.
type exporter struct {
	url     string
	service string
	headers http.Header // from OTEL_EXPORTER_OTLP_HEADERS: the agent's token
	client  *http.Client

	mu      sync.Mutex
	pending []span
	dropped int
}

func (e *exporter) add(s span) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.pending) >= maxPending {
		e.pending = e.pending[1:]
		e.dropped++
	}
	e.pending = append(e.pending, s)
}

func (e *exporter) run(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if err := e.send(ctx); err != nil && !errors.Is(err, context.Canceled) {
				log.Printf("shop: sending spans: %v", err)
			}
		}
	}
}

func (e *exporter) send(ctx context.Context) error {
	e.mu.Lock()
	batch, dropped := e.pending, e.dropped
	e.pending, e.dropped = nil, 0
	e.mu.Unlock()
	if dropped > 0 {
		log.Printf("shop: dropped %d spans the agent did not take in time", dropped)
	}
	if len(batch) == 0 {
		return nil
	}
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", e.service)
	spans := rs.ScopeSpans().AppendEmpty().Spans()
	spans.EnsureCapacity(len(batch))
	for _, s := range batch {
		sp := spans.AppendEmpty()
		var tid [16]byte
		var sid [8]byte
		rand.Read(tid[:])
		rand.Read(sid[:])
		sp.SetTraceID(pcommon.TraceID(tid))
		sp.SetSpanID(pcommon.SpanID(sid))
		sp.SetName("GET " + s.route)
		sp.SetKind(ptrace.SpanKindServer)
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(s.start))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(s.end))
		sp.Attributes().PutStr("http.route", s.route)
		sp.Attributes().PutInt("http.response.status_code", 200)
		sp.Attributes().PutInt("thread.id", int64(s.tid))
	}
	body, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, vs := range e.headers {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := e.client.Do(req)
	if err != nil {
		return fmt.Errorf("%d spans lost: %w", len(batch), err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%d spans lost: the agent answered %s", len(batch), resp.Status)
	}
	return nil
}

// otlpHeaders reads OTEL_EXPORTER_OTLP_HEADERS as the OTel SDKs do:
// comma-separated key=value pairs, each value percent-encoded
// ("authorization=Bearer%20<token>").
func otlpHeaders(s string) (http.Header, error) {
	h := http.Header{}
	for _, pair := range strings.Split(s, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%q: want key=value", pair)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("%q: %v", pair, err)
		}
		h.Add(strings.TrimSpace(k), dv)
	}
	return h, nil
}
