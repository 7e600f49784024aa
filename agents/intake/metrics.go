package intake

import "github.com/prometheus/client_golang/prometheus"

// Sources, the values of the source label.
const (
	SourceOTLPGRPC = "otlp_grpc"
	SourceOTLPHTTP = "otlp_http"
	SourceUDP      = "udp"
	SourceUnixgram = "unixgram"
)

// Drop reasons that are not a line-protocol or span field (see line.go and
// spans.go for those).
const (
	reasonQueueFull       = "queue_full"
	reasonClosed          = "closed" // a datagram read while closing
	reasonTooLarge        = "too_large"
	reasonDecode          = "decode"
	reasonContentType     = "content_type"
	reasonContentEncoding = "content_encoding"
	// reasonOverBudget: an OTLP request refused, retryably, because the
	// requests in flight hold the decode budget (cost.go).
	reasonOverBudget = "over_budget"
	// reasonTooManySpans: an OTLP request of more than
	// max_spans_per_request spans.
	reasonTooManySpans = "too_many_spans"
	// reasonSilentStream: a gRPC Export stream whose message did not
	// arrive within otlp_read_timeout + otlp_write_timeout (a client
	// that opens streams and sends nothing).
	reasonSilentStream = "silent_stream"
	// reasonPeerStreams: a gRPC Export stream beyond its peer's
	// otlp_streams_per_peer.
	reasonPeerStreams = "peer_streams"
	// reasonOversizeMetadata: a gRPC connection closed for a header
	// block larger than the agent takes (otlp_grpc.go,
	// maxHeaderListBytes), counted once a connection.
	reasonOversizeMetadata = "oversize_metadata"
	// reasonUnauthenticated: an OTLP request without a token of
	// auth.token_file (auth.go), refused before its body is read.
	reasonUnauthenticated = "unauthenticated"
)

type metrics struct {
	requests         *prometheus.CounterVec // {source, outcome}
	drops            *prometheus.CounterVec // {source, reason}
	overflow         *prometheus.CounterVec // {kind}
	ignored          *prometheus.CounterVec // {source}
	queueLen         prometheus.GaugeFunc
	overflowService  prometheus.Counter
	overflowEndpoint prometheus.Counter
	evictions        *prometheus.CounterVec // {kind}
	evictService     prometheus.Counter
	evictEndpoint    prometheus.Counter
	budgetUsed       prometheus.GaugeFunc
	budgetLimit      prometheus.Gauge
	conns            *prometheus.GaugeVec   // {server}
	connsRefused     *prometheus.CounterVec // {server, reason}
	discarded        *prometheus.CounterVec // {source, signal}
	sources          map[string]*sourceMetrics
	dropTotals       *dropTotals // drops by reason, for Intake.Drops
}

// sourceMetrics holds one receiver's counters, resolved once so the hot
// path never hashes label values.
type sourceMetrics struct {
	name      string
	outcomes  [numOutcomes]prometheus.Counter
	queueFull reasonCounter
	ignored   prometheus.Counter
	drops     *prometheus.CounterVec
	totals    *dropTotals
	// discarded counts the OTLP requests of signals the agent does not
	// use, by signal (OTLP sources only).
	discarded map[string]prometheus.Counter
}

func newMetrics(queueLen, budgetUsed func() float64) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_intake_requests_total",
			Help: "Requests received, by source and sampling outcome: kept_slow (weight 1), kept_sampled (weight sample_every), sampled_out.",
		}, []string{"source", "outcome"}),
		drops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_intake_drops_total",
			Help: "Requests, lines, spans or whole OTLP requests dropped, by source and reason.",
		}, []string{"source", "reason"}),
		overflow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_intake_overflow_total",
			Help: "Requests filed under _overflow because the service (kind=service) or endpoint (kind=endpoint, kept requests only) cap was reached.",
		}, []string{"kind"}),
		ignored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_intake_spans_ignored_total",
			Help: "Valid OTLP spans that are not requests (client, internal, producer, consumer, or child spans of unspecified kind).",
		}, []string{"source"}),
		queueLen: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "spikehunt_intake_queue_length",
			Help: "Kept requests waiting for the exporter.",
		}, queueLen),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_intake_cardinality_evictions_total",
			Help: "Service names (kind=service) or endpoints (kind=endpoint) that lost their slot to a busier name in _overflow.",
		}, []string{"kind"}),
		budgetUsed: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "spikehunt_intake_decode_budget_used_bytes",
			Help: "Bytes of the decode budget held by OTLP requests in flight: bodies and what decoding them allocates.",
		}, budgetUsed),
		budgetLimit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "spikehunt_intake_decode_budget_limit_bytes",
			Help: "The decode budget (decode_budget_bytes); requests beyond it get HTTP 429 / gRPC ResourceExhausted.",
		}),
		conns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spikehunt_intake_connections",
			Help: "Open connections of each OTLP server (server=otlp_http, otlp_grpc).",
		}, []string{"server"}),
		connsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_intake_connections_refused_total",
			Help: "Connections the OTLP servers closed for want of a place (internal/peerconns), by server and reason: peer_full (the peer held otlp_max_connections_per_peer, all busy), server_full (no place the connection may take, none idle in its way), evicted_idle (an idle connection closed to make room for a newcomer).",
		}, []string{"server", "reason"}),
		discarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_intake_discarded_requests_total",
			Help: "OTLP export requests of a signal the agent does not use (signal=metrics, logs), answered success and discarded unread. Apps send them when OTEL_EXPORTER_OTLP_ENDPOINT points at the agent; OTEL_EXPORTER_OTLP_TRACES_ENDPOINT sends it traces only.",
		}, []string{"source", "signal"}),
		sources:    map[string]*sourceMetrics{},
		dropTotals: &dropTotals{},
	}
	m.evictService = m.evictions.WithLabelValues("service")
	m.evictEndpoint = m.evictions.WithLabelValues("endpoint")
	m.overflowService = m.overflow.WithLabelValues("service")
	m.overflowEndpoint = m.overflow.WithLabelValues("endpoint")
	for _, src := range []string{SourceOTLPGRPC, SourceOTLPHTTP, SourceUDP, SourceUnixgram} {
		s := &sourceMetrics{
			name:      src,
			queueFull: reasonCounter{c: m.drops.WithLabelValues(src, reasonQueueFull), totals: m.dropTotals, reason: reasonQueueFull},
			ignored:   m.ignored.WithLabelValues(src),
			drops:     m.drops,
			totals:    m.dropTotals,
		}
		if src == SourceOTLPGRPC || src == SourceOTLPHTTP {
			s.discarded = map[string]prometheus.Counter{
				signalMetrics: m.discarded.WithLabelValues(src, signalMetrics),
				signalLogs:    m.discarded.WithLabelValues(src, signalLogs),
			}
		}
		for o := range numOutcomes {
			s.outcomes[o] = m.requests.WithLabelValues(src, outcomeNames[o])
		}
		m.sources[src] = s
	}
	return m
}

func (s *sourceMetrics) drop(reason string, n int) {
	if n > 0 {
		s.drops.WithLabelValues(s.name, reason).Add(float64(n))
		s.totals.add(reason, uint64(n))
	}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.requests, m.drops, m.overflow, m.ignored, m.queueLen,
		m.evictions, m.budgetUsed, m.budgetLimit, m.conns, m.connsRefused, m.discarded} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
