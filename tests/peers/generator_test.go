package peers

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// spanLoad is the OTLP/gRPC load both node agents get: apps on one node,
// each with an OpenTelemetry SDK whose batch span processor exports
// batchSize server spans per ExportTraceServiceRequest, one export at a
// time, paced so that all of them together send rate spans/s.
type spanLoad struct {
	Apps      int // services on the node, one gRPC connection each
	Rate      int // spans/s over all apps
	BatchSize int // spans per request (the SDK's max_export_batch_size)
}

// loadCounts are what the receiver answered, counted as the responses come.
type loadCounts struct {
	sent     atomic.Int64 // spans in requests sent
	accepted atomic.Int64 // spans in answered requests, less partial_success.rejected_spans
	failed   atomic.Int64 // spans in requests answered with an error
	requests atomic.Int64
	missed   atomic.Int64 // spans not sent because an app fell more than a period behind
	lastErr  atomic.Value // string
}

// run sends until ctx ends; the counts are updated as each answer arrives.
func (l spanLoad) run(ctx context.Context, addr string, c *loadCounts) error {
	conns := make([]*grpc.ClientConn, l.Apps)
	for i := range conns {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return fmt.Errorf("otlp client for %s: %w", addr, err)
		}
		defer cc.Close()
		conns[i] = cc
	}
	// Each app exports every BatchSize × Apps / Rate seconds.
	every := time.Duration(float64(time.Second) * float64(l.BatchSize*l.Apps) / float64(l.Rate))
	var wg sync.WaitGroup
	for i, cc := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			app := newAppSpans(i, l.BatchSize)
			client := coltracepb.NewTraceServiceClient(cc)
			// Apps start spread over one period, as independent processes would.
			next := time.Now().Add(every * time.Duration(i) / time.Duration(l.Apps))
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(next)):
				}
				next = next.Add(every)
				// An app that fell behind (a slow answer, a busy machine)
				// skips the batches it missed instead of sending them in a
				// burst: the measured seconds see the load's rate, not a
				// catch-up from before them.
				now := time.Now()
				if behind := now.Sub(next); behind > every {
					c.missed.Add(int64(behind/every) * int64(l.BatchSize))
					next = now.Add(every)
				}
				req := app.next(now)
				c.sent.Add(int64(l.BatchSize))
				c.requests.Add(1)
				resp, err := client.Export(ctx, req)
				switch {
				case err != nil && ctx.Err() != nil:
					return
				case err != nil:
					c.failed.Add(int64(l.BatchSize))
					c.lastErr.Store(err.Error())
				default:
					c.accepted.Add(int64(l.BatchSize) - resp.GetPartialSuccess().GetRejectedSpans())
				}
			}
		}()
	}
	wg.Wait()
	return nil
}

var (
	appNames  = []string{"checkout", "cart", "catalog", "payments", "search", "users", "orders", "shipping"}
	appRoutes = []string{"/v1/cart/{id}", "/v1/cart/{id}/items", "/v1/item/{id}", "/v1/items", "/v1/search", "/v1/user/{id}",
		"/v1/order/{id}", "/v1/orders", "/v1/checkout", "/v1/payment/{id}", "/v1/shipping/quote", "/v1/price/{sku}",
		"/v1/stock/{sku}", "/v1/recommendations", "/v1/session", "/healthz"}
	methods     = []string{"GET", "GET", "GET", "POST", "GET", "PUT", "GET", "DELETE"}
	itemPaths   = numbered("/v1/item/%d", 1000)
	clientAddrs = numbered("10.1.0.%d", 250)
)

func numbered(format string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(format, i+1)
	}
	return out
}

// appSpans is one app's export request, rebuilt in place for each batch:
// the attributes an HTTP server instrumentation sets (semconv 1.26),
// trace and span ids that never repeat, and a latency mix of fast
// requests with a slow one in 5,000.
type appSpans struct {
	req   *coltracepb.ExportTraceServiceRequest
	spans []*tracepb.Span
	vals  []spanValues
	id    uint64 // span counter
	app   uint64
}

// spanValues are the attribute values of one span that change from batch
// to batch, set in place: the generator shares the machine with what it
// measures, so it allocates nothing per span.
type spanValues struct {
	method, route, path, client *commonpb.AnyValue_StringValue
	status                      *commonpb.AnyValue_IntValue
}

func newAppSpans(i, batch int) *appSpans {
	name := appNames[i%len(appNames)]
	res := &resourcepb.Resource{Attributes: []*commonpb.KeyValue{
		strAttr("service.name", name),
		strAttr("service.version", "1.42.0"),
		strAttr("service.instance.id", fmt.Sprintf("%s-7d9f8b6c5-%05d", name, 10000+i)),
		strAttr("host.name", "bench-node"),
		strAttr("k8s.namespace.name", "shop"),
		strAttr("k8s.pod.name", fmt.Sprintf("%s-7d9f8b6c5-x%04d", name, i)),
		strAttr("telemetry.sdk.name", "opentelemetry"),
		strAttr("telemetry.sdk.language", "go"),
		strAttr("telemetry.sdk.version", "1.38.0"),
		intAttr("process.pid", int64(4000+i)),
	}}
	a := &appSpans{spans: make([]*tracepb.Span, batch), vals: make([]spanValues, batch), app: uint64(i + 1)}
	for k := range a.spans {
		v := spanValues{
			method: &commonpb.AnyValue_StringValue{}, route: &commonpb.AnyValue_StringValue{},
			path: &commonpb.AnyValue_StringValue{}, client: &commonpb.AnyValue_StringValue{},
			status: &commonpb.AnyValue_IntValue{},
		}
		a.vals[k] = v
		a.spans[k] = &tracepb.Span{
			TraceId:      make([]byte, 16),
			SpanId:       make([]byte, 8),
			ParentSpanId: make([]byte, 8),
			Kind:         tracepb.Span_SPAN_KIND_SERVER,
			Status:       &tracepb.Status{},
			Attributes: []*commonpb.KeyValue{
				{Key: "http.request.method", Value: &commonpb.AnyValue{Value: v.method}},
				{Key: "http.route", Value: &commonpb.AnyValue{Value: v.route}},
				{Key: "http.response.status_code", Value: &commonpb.AnyValue{Value: v.status}},
				{Key: "url.path", Value: &commonpb.AnyValue{Value: v.path}},
				strAttr("url.scheme", "http"),
				strAttr("server.address", "shop.example"),
				intAttr("server.port", 8080),
				strAttr("network.protocol.version", "1.1"),
				{Key: "client.address", Value: &commonpb.AnyValue{Value: v.client}},
				strAttr("user_agent.original", "shop-frontend/3.1 (+okhttp)"),
			},
		}
	}
	a.req = &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource: res,
		ScopeSpans: []*tracepb.ScopeSpans{{
			Scope: &commonpb.InstrumentationScope{Name: "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp", Version: "0.63.0"},
			Spans: a.spans,
		}},
		SchemaUrl: "https://opentelemetry.io/schemas/1.26.0",
	}}}
	return a
}

// next fills the batch with spans that ended in the second before now.
func (a *appSpans) next(now time.Time) *coltracepb.ExportTraceServiceRequest {
	end0 := uint64(now.Add(-time.Second).UnixNano())
	step := uint64(time.Second) / uint64(len(a.spans))
	for k, s := range a.spans {
		a.id++
		n := a.id
		binary.BigEndian.PutUint64(s.TraceId[:8], a.app)
		binary.BigEndian.PutUint64(s.TraceId[8:], n*0x9E3779B97F4A7C15)
		binary.BigEndian.PutUint64(s.SpanId, n|1<<63)
		binary.BigEndian.PutUint64(s.ParentSpanId, n*0xBF58476D1CE4E5B9|1)
		route := appRoutes[n%uint64(len(appRoutes))]
		lat := time.Duration(800+n%4000) * time.Microsecond
		if n%5000 == 0 {
			lat = 750 * time.Millisecond
		}
		status := int64(200)
		switch {
		case n%97 == 0:
			status = 500
		case n%31 == 0:
			status = 404
		}
		end := end0 + uint64(k)*step
		s.EndTimeUnixNano = end
		s.StartTimeUnixNano = end - uint64(lat)
		method := methods[n%uint64(len(methods))]
		s.Name = method + " " + route
		v := a.vals[k]
		v.method.StringValue = method
		v.route.StringValue = route
		v.status.IntValue = status
		v.path.StringValue = itemPaths[n%uint64(len(itemPaths))]
		v.client.StringValue = clientAddrs[n%uint64(len(clientAddrs))]
		s.Status.Code = tracepb.Status_STATUS_CODE_UNSET
		if status >= 500 {
			s.Status.Code = tracepb.Status_STATUS_CODE_ERROR
		}
	}
	return a.req
}

func strAttr(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func intAttr(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}
