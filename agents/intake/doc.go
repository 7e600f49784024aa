// Package intake is the per-request latency intake of spikehunt-agent: it
// receives one event per served request, decides which requests to keep
// (docs/design.md §3) and hands the kept ones to the exporter as
// telemetry.Request values.
//
// Receivers, each optional (an empty address in Config disables it):
//   - OTLP/gRPC TraceService (otlp_grpc.go) and OTLP/HTTP POST /v1/traces
//     in protobuf or JSON, optionally gzip (otlp_http.go). Only request
//     spans count: SERVER spans and root spans of kind UNSPECIFIED
//     (spans.go); invalid ones come back as a partial success.
//     The MetricsService and LogsService, POST /v1/metrics and /v1/logs,
//     answer success and discard what they are sent (otlp_discard.go):
//     SDKs pointed at the agent by OTEL_EXPORTER_OTLP_ENDPOINT send them.
//   - a line protocol over UDP and a unix datagram socket (line.go), for
//     apps without an OTel SDK; package agents/client writes it.
//
// Who may send at all (auth.go): OTLP senders show a bearer token from
// Config.Auth.TokenFile, checked before a body is read; a receiver bound
// beyond loopback that cannot authenticate its senders (OTLP without a
// token file, UDP always) refuses to start unless
// Config.Auth.AllowUnauthenticated. The unix socket's file mode and the
// kernel's credentials guard it instead.
//
// Each datagram's sender is known (the kernel's credentials of the process
// behind a unix datagram, a UDP datagram's source address, an OTLP
// request's peer address) and judged against Config.Trigger (trust.go);
// the tap passes it on, and only a trusted sender's request may fire a
// capture.
//
// Every request then goes through the cardinality caps (cardinality.go:
// the slots go to the names with the most requests, so rare names cannot
// squat them) and the sampler (sampling.go, tail.go): slow requests are
// kept with weight 1, the rest one in N with weight N.
//
// # What a request may cost
//
// Nothing a client sends can take the agent past its memory: an OTLP
// request is bounded on the wire and decompressed (max_request_bytes), in
// spans (max_spans_per_request) and in nesting, and before it is decoded
// its decoded size is estimated from the protobuf's shape and taken from a
// budget that all OTLP requests in flight share (decode_budget_bytes,
// cost.go). Protobuf is priced and decoded in one walk that makes none of
// pdata's objects (decode_spans.go): it takes exactly the messages pdata
// takes, and backs out to pdata on anything else, so that a refusal is
// always pdata's or the pricing walk's. A request that finds the budget spent gets HTTP 429 with
// Retry-After, or gRPC ResourceExhausted with a RetryInfo; one that could
// never fit gets 413 / ResourceExhausted without. Request spans that
// started more than max_span_age ago or end more than max_span_ahead from
// now are refused (too_old, in_future). The OTLP servers close idle
// connections (otlp_idle_timeout; gRPC also after otlp_max_connection_age),
// bound reading and writing a request, and hold at most
// otlp_max_connections each, otlp_max_connections_per_peer of one peer;
// a newcomer takes the place of an idle connection before it is refused
// (conns.go, internal/peerconns).
//
// # One sender cannot refuse the others
//
// Each peer (client IP) holds at most decode_budget_per_peer_bytes of the
// budget and otlp_streams_per_peer gRPC Export calls. A gRPC message takes
// the budget once it has arrived, not as its stream opens, so a stream
// that sends nothing holds only one of its peer's calls until the call's
// timeout ends it (counted as silent_stream). gRPC header lists are
// bounded at 8 KiB; a header block past 16 KiB on the wire closes its
// connection (oversize_metadata).
//
// # Lifecycle
//
//	in, err := intake.New(cfg, logger) // validates; binds nothing
//	in.Register(reg)                   // optional
//	err = in.Start(ctx)                // binds all receivers or none
//	go exporter.Run(ctx, in.Out(), …)  // read Out until it is closed
//	…
//	in.Close()                         // stops receivers, then closes Out
//
// Why one package: the receivers (OTLP/gRPC, OTLP/HTTP, the line
// protocol) share one decode budget, one sampler, one cardinality cap and
// one bounded queue, which are what make the intake safe on a busy node;
// split, each would reach into the others' accounting. Each file is one
// receiver or one of those shared bounds.
//
// The caller owns the Intake and must call Close, also after a failed
// Start. The intake owns one goroutine per datagram socket, the gRPC and
// HTTP servers' goroutines, and Out's channel: it closes Out in Close,
// after the last send, and nobody else may. Close returns after every
// goroutine it started has ended (in-flight OTLP requests get 5 s).
//
// Receivers never block on the consumer: Out is a bounded queue and a
// request that finds it full is dropped and counted (reason queue_full).
// Every drop is counted in spikehunt_intake_drops_total{source,reason};
// nothing is lost silently except what the kernel drops from a full socket
// buffer (see /proc/net/udp).
package intake
