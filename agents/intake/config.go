package intake

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spikehunt/spikehunt/internal/defaults"
	"github.com/spikehunt/spikehunt/internal/peerconns"
)

// Config configures the receivers, the sampler and the hand-off queue.
//
// Start from DefaultConfig: it enables all four receivers on localhost. An
// empty address disables that receiver. A zero numeric field means its
// default (WithDefaults fills them in; New does), so a hand-written Config
// only names what it changes.
type Config struct {
	// OTLPGRPC is the host:port of the OTLP/gRPC trace receiver
	// (default 127.0.0.1:4317, the OTLP default port). Metrics and logs
	// exported to it are answered success and discarded (otlp_discard.go).
	OTLPGRPC string `yaml:"otlp_grpc"`
	// OTLPHTTP is the host:port of the OTLP/HTTP receiver, path /v1/traces
	// (default 127.0.0.1:4318); /v1/metrics and /v1/logs are answered
	// success and discarded.
	OTLPHTTP string `yaml:"otlp_http"`
	// LineUDP is the host:port of the line-protocol UDP receiver
	// (default 127.0.0.1:7171).
	LineUDP string `yaml:"line_udp"`
	// LineUnix is the path of the line-protocol unix datagram socket
	// (default /run/spikehunt/agent.sock; its folder is made 0755, so
	// that apps of every user reach it, and must not hold the agent's
	// control socket). A stale socket file left by a
	// dead agent is replaced; a live one is an error. Not on Windows.
	// The kernel queues at most net.unix.max_dgram_qlen datagrams (often
	// 10) per socket; senders wait while it is full, and the Go client
	// drops after a second, so raise that sysctl on busy nodes.
	LineUnix string `yaml:"line_unix"`
	// LineUnixMode is the socket file's permission (default 0666: apps in
	// other containers run as other users; restrict it when they do not).
	LineUnixMode os.FileMode `yaml:"line_unix_mode"`

	// MaxRequestBytes bounds one OTLP request, compressed and
	// decompressed (default 4 MiB, the OTel Collector's gRPC default).
	// Larger: HTTP 413, gRPC ResourceExhausted.
	MaxRequestBytes int `yaml:"max_request_bytes"`
	// MaxSpansPerRequest bounds the spans (of any kind) in one OTLP
	// request (default 16384, twice the OTel Collector batch processor's
	// send_batch_size; SDKs send 512). Decoded, an empty span costs a
	// hundred times its two bytes on the wire, so the byte limit alone
	// does not bound memory. More: HTTP 413, gRPC ResourceExhausted, not
	// retryable.
	MaxSpansPerRequest int `yaml:"max_spans_per_request"`
	// DecodeBudgetBytes bounds the memory that OTLP requests in flight
	// may hold, over OTLP/HTTP and gRPC together: the decompressed body
	// plus what decoding it will allocate, estimated from the protobuf's
	// shape before anything is decoded (default 64 MiB; at least
	// 2 × max_request_bytes). A request that finds the budget spent is
	// answered HTTP 429 with Retry-After, or gRPC ResourceExhausted with
	// a RetryInfo, which OTLP clients retry; one that would need more
	// than the whole budget gets 413 / ResourceExhausted without
	// RetryInfo. Raise it with the agent's memory limit, not past it.
	DecodeBudgetBytes int64 `yaml:"decode_budget_bytes"`
	// OTLPDecoder decodes OTLP protobuf, over gRPC and HTTP: "direct"
	// (the default) walks the message straight into requests, in a few
	// times less CPU than pdata and without garbage; "pdata" decodes it with
	// the OpenTelemetry Collector's pdata, as the direct decoder does on
	// any message it does not take. Both accept and refuse the same
	// messages and file the same requests (decode_spans.go); set "pdata"
	// only to rule the direct decoder out, or to measure it. OTLP/JSON
	// is always decoded with pdata.
	OTLPDecoder string `yaml:"otlp_decoder"`
	// MaxSpanAge and MaxSpanAhead bound a request span's times against
	// the agent's clock: a span that started more than MaxSpanAge ago
	// (default 1h) or ends more than MaxSpanAhead from now (default 5m)
	// is rejected, counted with reason too_old or in_future and reported
	// in the partial success. Apps on this node export within seconds
	// and their SDKs give up retrying within minutes, so an hour-old
	// span is a replay or a broken clock; and every day a batch spans is
	// a ClickHouse partition its insert writes. The node shares one
	// clock, so 5 minutes ahead leaves room only for a clock step.
	MaxSpanAge   time.Duration `yaml:"max_span_age"`
	MaxSpanAhead time.Duration `yaml:"max_span_ahead"`

	// OTLPReadTimeout bounds reading one OTLP/HTTP request, headers and
	// body, and the gRPC handshake (default 30s). OTLPWriteTimeout bounds
	// an OTLP/HTTP request from its headers to the end of the answer
	// (default 30s). OTLPIdleTimeout closes a keep-alive connection, HTTP
	// or gRPC, that carried no request for that long (default 2m; OTLP
	// clients reconnect on their own). OTLPMaxConnectionAge makes a gRPC
	// client reconnect after that long (default 30m), so that no
	// connection is held forever, with a 30 s grace for its requests.
	OTLPReadTimeout      time.Duration `yaml:"otlp_read_timeout"`
	OTLPWriteTimeout     time.Duration `yaml:"otlp_write_timeout"`
	OTLPIdleTimeout      time.Duration `yaml:"otlp_idle_timeout"`
	OTLPMaxConnectionAge time.Duration `yaml:"otlp_max_connection_age"`
	// OTLPMaxConnections caps the open connections of each OTLP server
	// (default 1024). OTLPMaxConnectionsPerPeer caps one peer's (one IP
	// address's) open connections to each server, below it (default a
	// quarter of it); the last sixteenth of the places are kept for the
	// trusted senders of Trigger.CIDRs. A connection that finds no place
	// takes the one of the connection idle longest of the peer with the
	// most (its own peer's first, at that peer's cap); only when every
	// one in its way is busy is it closed at once. Both are counted in
	// spikehunt_intake_connections_refused_total{server, reason}
	// (internal/peerconns).
	OTLPMaxConnections        int `yaml:"otlp_max_connections"`
	OTLPMaxConnectionsPerPeer int `yaml:"otlp_max_connections_per_peer"`
	// OTLPStreamsPerPeer caps the gRPC Export calls one peer has in
	// flight, over all its connections (default 16; an SDK makes one at
	// a time, a Collector's exporter ten). grpc-go holds a message while
	// it arrives, before the decode budget sees it: this bounds what one
	// peer makes it hold. More: ResourceExhausted with a RetryInfo,
	// counted with reason peer_streams.
	OTLPStreamsPerPeer int `yaml:"otlp_streams_per_peer"`
	// DecodeBudgetPerPeerBytes is the most of the decode budget one
	// peer's requests may hold at once (default a quarter of
	// decode_budget_bytes, at least 2 × max_request_bytes), so that one
	// sender cannot spend what the others need. A request that would
	// take its peer past it is refused as over_budget, retryably; one
	// that would not fit it even alone gets 413.
	DecodeBudgetPerPeerBytes int64 `yaml:"decode_budget_per_peer_bytes"`
	// SocketReadBuffer is SO_RCVBUF for the datagram sockets (default
	// 4 MiB; the kernel caps it at net.core.rmem_max). Datagrams that
	// arrive while it is full are lost in the kernel and show up in
	// /proc/net/udp drops, not here.
	SocketReadBuffer int `yaml:"socket_read_buffer"`

	// SampleEvery keeps one in N requests that are not slow, with weight
	// N (default 10; 1 keeps everything that SampledPerSecond allows).
	SampleEvery int `yaml:"sample_every"`
	// SampledPerSecond bounds the sampled (not slow) requests kept per
	// service each second (default 100; negative disables): a service
	// busier than SampleEvery × SampledPerSecond requests a second is
	// kept one in SampleEvery × 2^k instead, k set each second from the
	// second before. Slow requests are kept whatever the rate.
	SampledPerSecond int `yaml:"sampled_per_second"`
	// SlowThreshold: a request at least this slow is always kept with
	// weight 1 (default 500ms, the trigger of the thousand spikes (docs/field-stories.md); negative disables
	// the fixed threshold and leaves the rolling tail).
	SlowThreshold time.Duration `yaml:"slow_threshold"`
	// ServiceSlowThresholds overrides SlowThreshold per service.name.
	ServiceSlowThresholds map[string]time.Duration `yaml:"service_slow_thresholds"`
	// TailQuantile: a request above this rolling quantile of its service's
	// latency on this host is always kept (default 0.99; negative
	// disables). See tail.go for the estimator.
	TailQuantile float64 `yaml:"tail_quantile"`
	// TailWindow is the span of the rolling estimate (default 60s; it
	// moves in sixths of the window).
	TailWindow time.Duration `yaml:"tail_window"`
	// TailMinCount: the rolling quantile is used only once the window
	// holds this many requests (default 200); below it, a p99 is one
	// sample and would keep noise.
	TailMinCount int `yaml:"tail_min_count"`

	// MaxServices and MaxEndpoints cap the distinct service names on this
	// host and endpoints per service (defaults 64 and 200); requests
	// beyond them go to "_overflow". When the slots are full, the names
	// with the most requests keep them: a name in _overflow takes the
	// slot of the quietest one once it has had more than twice its
	// requests, counted with a half-life of CardinalityHalfLife (default
	// 1m), so a few requests now and then cannot hold a slot against real
	// traffic (cardinality.go). A name unused for CardinalityIdle
	// (default 10m) frees its slot. Endpoints count kept requests only:
	// a sampled-out request is never exported and takes no slot.
	MaxServices         int           `yaml:"max_services"`
	MaxEndpoints        int           `yaml:"max_endpoints"`
	CardinalityIdle     time.Duration `yaml:"cardinality_idle"`
	CardinalityHalfLife time.Duration `yaml:"cardinality_half_life"`

	// Trigger is who may fire captures (trust.go). Everyone's requests
	// are received; only these senders' fire the capture engine's
	// trigger.
	Trigger TriggerConfig `yaml:"trigger"`
	// Auth is who may send at all over the receivers that face a network
	// (auth.go): OTLP senders show a bearer token, and a receiver that
	// faces a network without a way to authenticate refuses to start.
	Auth AuthConfig `yaml:"auth"`

	// QueueSize bounds the kept requests waiting for the exporter
	// (default 16384, about 2 MiB); when full, requests are dropped and
	// counted with reason queue_full.
	QueueSize int `yaml:"queue_size"`
}

// Defaults, exported so the agent's flag help can print them.
const (
	DefaultOTLPGRPC             = "127.0.0.1:4317"
	DefaultOTLPHTTP             = "127.0.0.1:4318"
	DefaultLineUDP              = "127.0.0.1:7171"
	DefaultLineUnix             = "/run/spikehunt/agent.sock"
	DefaultMaxRequestBytes      = 4 << 20
	DefaultMaxSpansPerRequest   = 16384
	DefaultDecodeBudgetBytes    = 64 << 20
	DefaultMaxSpanAge           = time.Hour
	DefaultMaxSpanAhead         = 5 * time.Minute
	DefaultOTLPReadTimeout      = 30 * time.Second
	DefaultOTLPWriteTimeout     = 30 * time.Second
	DefaultOTLPIdleTimeout      = 2 * time.Minute
	DefaultOTLPMaxConnectionAge = 30 * time.Minute
	DefaultOTLPMaxConnections   = 1024
	DefaultOTLPStreamsPerPeer   = 16
	DefaultSocketReadBuffer     = 4 << 20
	DefaultSampleEvery          = 10
	DefaultSampledPerSecond     = 100
	DefaultSlowThreshold        = 500 * time.Millisecond
	DefaultTailQuantile         = 0.99
	DefaultTailWindow           = time.Minute
	DefaultTailMinCount         = 200
	DefaultMaxServices          = 64
	DefaultMaxEndpoints         = 200
	DefaultCardinalityIdle      = 10 * time.Minute
	DefaultCardinalityHalfLife  = time.Minute
	DefaultQueueSize            = 16384
)

// The values of Config.OTLPDecoder.
const (
	OTLPDecoderDirect = "direct"
	OTLPDecoderPdata  = "pdata"
)

// DefaultConfig enables every receiver on localhost with default limits.
func DefaultConfig() Config {
	c := Config{
		OTLPGRPC: DefaultOTLPGRPC,
		OTLPHTTP: DefaultOTLPHTTP,
		LineUDP:  DefaultLineUDP,
		LineUnix: DefaultLineUnix,
	}
	c = c.WithDefaults()
	// The per-peer shares follow the totals a config file may still
	// change: WithDefaults (New) takes them from the final ones.
	c.OTLPMaxConnectionsPerPeer, c.DecodeBudgetPerPeerBytes = 0, 0
	return c
}

// WithDefaults returns c with every zero field that has a default set to
// it; c itself is not changed.
func (c Config) WithDefaults() Config {
	defaults.Fill(&c.LineUnixMode, 0o666)
	defaults.Fill(&c.MaxRequestBytes, DefaultMaxRequestBytes)
	defaults.Fill(&c.MaxSpansPerRequest, DefaultMaxSpansPerRequest)
	defaults.Fill(&c.DecodeBudgetBytes, max(DefaultDecodeBudgetBytes, 2*int64(c.MaxRequestBytes)))
	defaults.Fill(&c.OTLPDecoder, OTLPDecoderDirect)
	defaults.Fill(&c.MaxSpanAge, DefaultMaxSpanAge)
	defaults.Fill(&c.MaxSpanAhead, DefaultMaxSpanAhead)
	defaults.Fill(&c.OTLPReadTimeout, DefaultOTLPReadTimeout)
	defaults.Fill(&c.OTLPWriteTimeout, DefaultOTLPWriteTimeout)
	defaults.Fill(&c.OTLPIdleTimeout, DefaultOTLPIdleTimeout)
	defaults.Fill(&c.OTLPMaxConnectionAge, DefaultOTLPMaxConnectionAge)
	defaults.Fill(&c.OTLPMaxConnections, DefaultOTLPMaxConnections)
	defaults.Fill(&c.OTLPMaxConnectionsPerPeer, peerconns.DefaultPerPeer(c.OTLPMaxConnections))
	defaults.Fill(&c.OTLPStreamsPerPeer, DefaultOTLPStreamsPerPeer)
	defaults.Fill(&c.DecodeBudgetPerPeerBytes, min(c.DecodeBudgetBytes, max(c.DecodeBudgetBytes/4, 2*int64(c.MaxRequestBytes))))
	defaults.Fill(&c.SocketReadBuffer, DefaultSocketReadBuffer)
	defaults.Fill(&c.SampleEvery, DefaultSampleEvery)
	defaults.Fill(&c.SampledPerSecond, DefaultSampledPerSecond)
	defaults.Fill(&c.SlowThreshold, DefaultSlowThreshold)
	defaults.Fill(&c.TailQuantile, DefaultTailQuantile)
	defaults.Fill(&c.TailWindow, DefaultTailWindow)
	defaults.Fill(&c.TailMinCount, DefaultTailMinCount)
	defaults.Fill(&c.MaxServices, DefaultMaxServices)
	defaults.Fill(&c.MaxEndpoints, DefaultMaxEndpoints)
	defaults.Fill(&c.CardinalityIdle, DefaultCardinalityIdle)
	defaults.Fill(&c.CardinalityHalfLife, DefaultCardinalityHalfLife)
	defaults.Fill(&c.QueueSize, DefaultQueueSize)
	return c
}

// Validate checks c as New would run it, its zero fields taken as their
// defaults. It does not change c.
func (c Config) Validate() error {
	if c.OTLPGRPC == "" && c.OTLPHTTP == "" && c.LineUDP == "" && c.LineUnix == "" {
		return errors.New("intake: no receiver configured: set otlp_grpc, otlp_http, line_udp or line_unix (DefaultConfig enables all four on localhost)")
	}
	c = c.WithDefaults()
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("intake: "+format, args...))
		}
	}
	check(c.LineUnixMode&^os.ModePerm == 0, "line_unix_mode = %o, want permission bits only", c.LineUnixMode)
	check(c.MaxRequestBytes >= 1<<10 && c.MaxRequestBytes <= 1<<30, "max_request_bytes = %d, want 1 KiB–1 GiB", c.MaxRequestBytes)
	check(c.MaxSpansPerRequest >= 1 && c.MaxSpansPerRequest <= 1<<22, "max_spans_per_request = %d, want 1–4194304", c.MaxSpansPerRequest)
	check(c.DecodeBudgetBytes >= 2*int64(c.MaxRequestBytes) && c.DecodeBudgetBytes <= 1<<40,
		"decode_budget_bytes = %d, want at least 2 × max_request_bytes (%d): a request of the largest size must fit, with room for a second", c.DecodeBudgetBytes, 2*c.MaxRequestBytes)
	check(c.OTLPDecoder == OTLPDecoderDirect || c.OTLPDecoder == OTLPDecoderPdata,
		"otlp_decoder = %q, want %q (the default) or %q", c.OTLPDecoder, OTLPDecoderDirect, OTLPDecoderPdata)
	check(c.MaxSpanAge >= time.Minute && c.MaxSpanAge <= 24*time.Hour,
		"max_span_age = %s, want 1m–24h: an agent forwards spans as they end, and each day a batch spans is one more ClickHouse partition per insert", c.MaxSpanAge)
	check(c.MaxSpanAhead >= time.Second && c.MaxSpanAhead <= 24*time.Hour, "max_span_ahead = %s, want 1s–24h", c.MaxSpanAhead)
	check(c.OTLPReadTimeout >= 10*time.Millisecond && c.OTLPReadTimeout <= time.Hour, "otlp_read_timeout = %s, want 10ms–1h", c.OTLPReadTimeout)
	check(c.OTLPWriteTimeout >= 10*time.Millisecond && c.OTLPWriteTimeout <= time.Hour, "otlp_write_timeout = %s, want 10ms–1h", c.OTLPWriteTimeout)
	check(c.OTLPIdleTimeout >= 10*time.Millisecond && c.OTLPIdleTimeout <= 24*time.Hour, "otlp_idle_timeout = %s, want 10ms–24h", c.OTLPIdleTimeout)
	check(c.OTLPMaxConnectionAge >= time.Second && c.OTLPMaxConnectionAge <= 7*24*time.Hour, "otlp_max_connection_age = %s, want 1s–168h", c.OTLPMaxConnectionAge)
	check(c.OTLPMaxConnections >= 1 && c.OTLPMaxConnections <= 1<<20, "otlp_max_connections = %d, want 1–1048576", c.OTLPMaxConnections)
	check(c.OTLPMaxConnectionsPerPeer >= 1 && (c.OTLPMaxConnections == 1 || c.OTLPMaxConnectionsPerPeer < c.OTLPMaxConnections),
		"otlp_max_connections_per_peer = %d, want 1 to otlp_max_connections - 1 (%d): one peer must leave the others room", c.OTLPMaxConnectionsPerPeer, c.OTLPMaxConnections-1)
	check(c.OTLPStreamsPerPeer >= 1 && c.OTLPStreamsPerPeer <= 1<<16, "otlp_streams_per_peer = %d, want 1–65536", c.OTLPStreamsPerPeer)
	check(c.DecodeBudgetPerPeerBytes >= int64(c.MaxRequestBytes) && c.DecodeBudgetPerPeerBytes <= c.DecodeBudgetBytes,
		"decode_budget_per_peer_bytes = %d, want max_request_bytes (%d) to decode_budget_bytes (%d)", c.DecodeBudgetPerPeerBytes, c.MaxRequestBytes, c.DecodeBudgetBytes)
	check(c.SocketReadBuffer >= 1<<12 && c.SocketReadBuffer <= 1<<30, "socket_read_buffer = %d, want 4 KiB–1 GiB", c.SocketReadBuffer)
	check(c.SampleEvery >= 1 && c.SampleEvery <= 1_000_000, "sample_every = %d, want 1–1000000", c.SampleEvery)
	check(c.SampledPerSecond < 0 || c.SampledPerSecond <= 1_000_000, "sampled_per_second = %d, want 1–1000000 (negative disables)", c.SampledPerSecond)
	check(c.TailQuantile < 0 || (c.TailQuantile >= 0.5 && c.TailQuantile < 1), "tail_quantile = %g, want 0.5 ≤ q < 1 (negative disables)", c.TailQuantile)
	check(c.TailWindow >= 6*time.Second && c.TailWindow <= time.Hour, "tail_window = %s, want 6s–1h", c.TailWindow)
	check(c.TailMinCount >= 1, "tail_min_count = %d, want ≥ 1", c.TailMinCount)
	check(c.MaxServices >= 1 && c.MaxServices <= 100_000, "max_services = %d, want 1–100000", c.MaxServices)
	check(c.MaxEndpoints >= 1 && c.MaxEndpoints <= 100_000, "max_endpoints = %d, want 1–100000", c.MaxEndpoints)
	check(c.CardinalityIdle >= time.Second, "cardinality_idle = %s, want ≥ 1s", c.CardinalityIdle)
	check(c.CardinalityHalfLife >= time.Second && c.CardinalityHalfLife <= 24*time.Hour, "cardinality_half_life = %s, want 1s–24h", c.CardinalityHalfLife)
	check(c.QueueSize >= 1 && c.QueueSize <= 1<<24, "queue_size = %d, want 1–16777216", c.QueueSize)
	if err := c.Trigger.Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.validateAuth()...)
	for svc, d := range c.ServiceSlowThresholds {
		check(svc != "", "service_slow_thresholds: empty service name")
		check(d > 0, "service_slow_thresholds[%q] = %s, want > 0", svc, d)
	}
	return errors.Join(errs...)
}

// slowThreshold is the fixed threshold for svc; 0 means none.
func (c *Config) slowThreshold(svc string) time.Duration {
	if d, ok := c.ServiceSlowThresholds[svc]; ok {
		return d
	}
	if c.SlowThreshold < 0 {
		return 0
	}
	return c.SlowThreshold
}
