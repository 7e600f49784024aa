package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkAgentOTLPUnderLoad is BenchmarkAgentUnderLoad over OTLP/gRPC:
// an app instrumented with the OpenTelemetry Go SDK (batch span
// processor, OTLP/gRPC exporter, the SDK's defaults) sends 20,000
// spans/s on loopback, 10,000 HTTP server spans with a database client
// span under each, and the agent's CPU (share of one core) is measured
// over SPIKEHUNT_BENCH_SECONDS (default 30). The agent runs twice under
// the same load, with the direct decoder and with the pdata one
// (--intake.otlp-decoder pdata), so that the ratio comes from one run of
// the same machine; a first run without load gives the agent's floor (its
// samplers, exporter and metrics), so that what the intake costs shows. SPIKEHUNT_BENCH_CPUPROFILE=file saves the direct
// run's CPU profile, and file.pdata the other's.
func BenchmarkAgentOTLPUnderLoad(b *testing.B) {
	agentOTLPBench.Do(func() {
		profile := os.Getenv("SPIKEHUNT_BENCH_CPUPROFILE")
		for _, run := range []struct {
			decoder string
			rate    int
			r       *agentFigures
			profile string
		}{
			{"direct", 0, &agentOTLPBench.idle, ""},
			{"pdata", 20000, &agentOTLPBench.pdata, profile + ".pdata"},
			{"direct", 20000, &agentOTLPBench.direct, profile},
		} {
			if profile == "" {
				run.profile = ""
			}
			*run.r, agentOTLPBench.err = measureAgentUnder(b, []string{"--intake.otlp-grpc", "127.0.0.1:0", "--intake.otlp-decoder", run.decoder},
				run.profile, agentOTLPGRPC, func(ctx context.Context, addr string) int { return otlpLoad(ctx, addr, run.rate) })
			if agentOTLPBench.err != nil {
				return
			}
		}
	})
	if agentOTLPBench.err != nil {
		b.Fatal(agentOTLPBench.err)
	}
	d, p := agentOTLPBench.direct, agentOTLPBench.pdata
	b.ReportMetric(d.cpuPct, "agent.otlp_cpu_pct_20k:%")
	b.ReportMetric(p.cpuPct, "agent.otlp_cpu_pct_20k_pdata:%")
	b.ReportMetric(d.cpuPct/p.cpuPct, "agent.otlp_cpu_ratio_direct_to_pdata:x")
	b.ReportMetric(agentOTLPBench.idle.cpuPct, "agent.otlp_cpu_pct_idle:%")
	b.ReportMetric(d.sysPct, "agent.otlp_cpu_sys_pct_20k:%")
	b.ReportMetric(p.sysPct, "agent.otlp_cpu_sys_pct_20k_pdata:%")
	b.ReportMetric(d.switches, "agent.otlp_context_switches_per_s:/s")
	b.ReportMetric(d.rssMiB, "agent.otlp_rss_mib:MiB")
	b.ReportMetric(p.rssMiB, "agent.otlp_rss_mib_pdata:MiB")
	b.ReportMetric(d.rate, "agent.otlp_load_spans_per_s:spans/s")
	b.ReportMetric(p.rate, "agent.otlp_load_spans_per_s_pdata:spans/s")
}

var agentOTLPBench struct {
	sync.Once
	direct, pdata agentFigures
	idle          agentFigures // the same agent without load
	err           error
}

func agentOTLPGRPC(p *agentProc) (string, error) {
	m := regexp.MustCompile(`otlp-grpc (\S+)`).FindStringSubmatch(p.out.String())
	if m == nil {
		return "", fmt.Errorf("no otlp-grpc address in the agent's output:\n%s", p.out.String())
	}
	return m[1], nil
}

// countingExporter counts the spans its exporter delivered.
type countingExporter struct {
	sdktrace.SpanExporter
	n atomic.Int64
}

func (c *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := c.SpanExporter.ExportSpans(ctx, spans)
	if err == nil {
		c.n.Add(int64(len(spans)))
	}
	return err
}

// otlpLoad sends rate spans/s to addr through the OTel Go SDK until ctx
// ends, as an instrumented HTTP service would: half server spans with the
// HTTP semantic conventions' attributes (16 routes, latencies 0.8–4.8 ms,
// one in 5,000 slow, one in 50 a 503), half database client spans under
// them. It returns the spans the exporter delivered. With rate 0 it only
// waits for ctx.
func otlpLoad(ctx context.Context, addr string, rate int) int {
	if rate <= 0 {
		<-ctx.Done()
		return 0
	}
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(addr), otlptracegrpc.WithInsecure())
	if err != nil {
		return 0
	}
	counted := &countingExporter{SpanExporter: exp}
	res, _ := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", "billy"), attribute.String("host.name", "bench-node")))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(counted, sdktrace.WithMaxQueueSize(1<<15)),
		sdktrace.WithResource(res))
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tp.Shutdown(sctx)
	}()
	tr := tp.Tracer("go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp")
	common := []attribute.KeyValue{
		attribute.String("http.request.method", "GET"), attribute.String("url.scheme", "http"),
		attribute.String("server.address", "billy.shop.svc"), attribute.Int("server.port", 8080),
		attribute.String("network.protocol.version", "1.1"), attribute.String("client.address", "10.244.3.17"),
		attribute.String("user_agent.original", "Go-http-client/1.1"),
	}
	db := trace.WithAttributes(attribute.String("db.system.name", "postgresql"),
		attribute.String("db.query.text", "SELECT * FROM items WHERE id = $1"), attribute.String("server.address", "pg.shop.svc"))
	const perTick = 100 // requests, two spans each
	tick := time.NewTicker(time.Second * perTick * 2 / time.Duration(rate))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return int(counted.n.Load())
		case <-tick.C:
		}
		now := time.Now()
		for j := range perTick {
			n := i*perTick + j
			lat := time.Duration(800+n%4000) * time.Microsecond
			if n%5000 == 0 {
				lat = 750 * time.Millisecond
			}
			code := 200
			if n%50 == 49 {
				code = 503
			}
			route := benchRoutes[j%len(benchRoutes)]
			at := now.Add(-lat)
			sctx, server := tr.Start(ctx, "GET "+route, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(at),
				trace.WithAttributes(common...), trace.WithAttributes(
					attribute.String("http.route", route), attribute.String("url.path", route),
					attribute.Int("http.response.status_code", code), attribute.Int("thread.id", 100+j%8)))
			_, child := tr.Start(sctx, "SELECT shop.items", trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(at.Add(100*time.Microsecond)), db)
			child.End(trace.WithTimestamp(at.Add(lat / 2)))
			server.End(trace.WithTimestamp(now))
		}
	}
}

var benchRoutes = func() (r [16]string) {
	for i := range r {
		r[i] = fmt.Sprintf("/v1/item/%d/{id}", i)
	}
	return r
}()
