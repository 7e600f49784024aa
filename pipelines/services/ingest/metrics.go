package ingest

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the ingester's self-observability (/metrics).
type metrics struct {
	rows        *prometheus.CounterVec   // {table}
	batchRows   *prometheus.HistogramVec // {table}
	insertSecs  *prometheus.HistogramVec // {table}
	retries     *prometheus.CounterVec   // {step}
	deadLetters *prometheus.CounterVec   // {reason}
	skipped     prometheus.Counter
	fallbacks   prometheus.CounterFunc
	lag         *prometheus.GaugeVec   // {topic, partition}
	refused     *prometheus.CounterVec // {table, reason}
	splits      *prometheus.CounterVec // {table}
	held        prometheus.Gauge
	fenced      prometheus.Counter
	relanded    *prometheus.CounterVec // {table}
	capped      *prometheus.CounterVec // {table, reason}
	missing     *prometheus.GaugeVec   // {topic}
}

func newMetrics() *metrics {
	return &metrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_ingest_rows_total", Help: "Rows inserted, by table (rows/s: rate of this).",
		}, []string{"table"}),
		batchRows: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "spikehunt_ingest_batch_rows", Help: "Rows per inserted batch.",
			Buckets: prometheus.ExponentialBuckets(100, 4, 8),
		}, []string{"table"}),
		insertSecs: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "spikehunt_ingest_insert_seconds", Help: "Time to insert one batch, retries excluded.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}, []string{"table"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_ingest_errors_total", Help: "Failed steps of a batch (intent, insert, commit), each retried with backoff; self_counters: the ingester's own counters rows, retried with its next report.",
		}, []string{"step"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_ingest_dead_letters_total", Help: "Messages sent to the dead-letter topic, by reason.",
		}, []string{"reason"}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spikehunt_ingest_spans_skipped_total", Help: "Valid spans that are not requests (client, internal, child spans).",
		}),
		fallbacks: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "spikehunt_ingest_span_decoder_fallbacks_total",
			Help: "Span messages the direct decoder left to the pdata decoder, which accepted them: right rows, slower; report a growing count.",
		}, func() float64 { return float64(pdataFallbacks.Load()) }),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spikehunt_ingest_consumer_lag", Help: "Messages behind the partition's high watermark, as of the last fetch.",
		}, []string{"topic", "partition"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_ingest_rows_refused_total",
			Help: "Rows not inserted, by table and reason: timestamp (outside the accepted window; its message is dead-lettered, its other rows inserted), or the reason ClickHouse refused them (their message is dead-lettered).",
		}, []string{"table", "reason"}),
		splits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_ingest_batch_splits_total", Help: "Batches (and halves of batches) split in two because ClickHouse refused their rows, to find the messages to dead-letter.",
		}, []string{"table"}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "spikehunt_ingest_partitions_held", Help: "Partitions paused because the dead-letter topic refuses their dead letters (retried with backoff; see /healthz).",
		}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spikehunt_ingest_fenced_batches_total", Help: "Batches abandoned uninserted because the member's lease on the partition ran out or Kafka refused its commit as stale; the partition's owner re-forms them.",
		}),
		relanded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_ingest_rows_reinserted_days_total",
			Help: "Days of a batch inserted again because ClickHouse had dropped the batch as a repeat of an insert whose part never landed (a crash between its deduplication log and its part; see landed.go).",
		}, []string{"table"}),
		capped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_ingest_attributes_capped_total",
			Help: "Attributes cut from rows that were inserted anyway, by table and reason: too_many (a point's attributes beyond 128, dropped), key_too_long (key over 256 bytes, dropped), value_too_long (a value over 1024 bytes, cut to it). See docs/hardening.md.",
		}, []string{"table", "reason"}),
		missing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spikehunt_ingest_topic_missing",
			Help: "1 while a source topic does not exist (it is watched for, the others consumed meanwhile; see /healthz), 0 once it is consumed.",
		}, []string{"topic"}),
	}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.rows, m.batchRows, m.insertSecs, m.retries, m.deadLetters, m.skipped, m.fallbacks, m.lag, m.refused, m.splits, m.held, m.fenced, m.relanded, m.capped, m.missing} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *metrics) setLag(topic string, partition int32, lag int64) {
	m.lag.WithLabelValues(topic, strconv.Itoa(int(partition))).Set(float64(max(lag, 0)))
}
