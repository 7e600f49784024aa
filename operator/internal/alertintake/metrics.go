package alertintake

import "github.com/prometheus/client_golang/prometheus"

// The subsystem is alertintake: spikehunt_intake_* is the agent's span
// intake (agents/intake).

// webhookMetrics are the Webhook's self-observability.
type webhookMetrics struct {
	accepted *prometheus.CounterVec // {endpoint}
	rejected *prometheus.CounterVec // {endpoint, reason}
	emitted  *prometheus.CounterVec // {endpoint}
	skipped  *prometheus.CounterVec // {endpoint, reason}
	conns    *prometheus.CounterVec // {reason}
}

func newWebhookMetrics() *webhookMetrics {
	return &webhookMetrics{
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_alertintake_webhook_accepted_total",
			Help: "Webhook requests answered 202, by endpoint (grafana, alertmanager).",
		}, []string{"endpoint"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_alertintake_webhook_rejected_total",
			Help: "Webhook requests refused, by endpoint and reason (method, too_large, read_error, malformed, " +
				"missing_signature, missing_timestamp, bad_timestamp, stale_timestamp, future_timestamp, bad_signature, " +
				"replayed, signed_before_start, missing_token, bad_token, sink_unavailable); nothing of them reached the operator.",
		}, []string{"endpoint", "reason"}),
		emitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_alertintake_webhook_alerts_emitted_total",
			Help: "Firing alerts of accepted webhook requests handed to the operator, by endpoint.",
		}, []string{"endpoint"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_alertintake_webhook_alerts_skipped_total",
			Help: "Alerts of accepted webhook requests that yield nothing, by endpoint and reason (resolved, no_service, invalid_labels).",
		}, []string{"endpoint", "reason"}),
		conns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_alertintake_webhook_connections_refused_total",
			Help: "Webhook connections closed for want of a place (internal/peerconns), by reason: peer_full (the client IP held max_connections_per_peer, all busy), server_full (no place the connection may take, none idle in its way), evicted_idle (an idle connection closed to make room for a newcomer).",
		}, []string{"reason"}),
	}
}

func (m *webhookMetrics) register(reg prometheus.Registerer) error {
	return registerAll(reg, m.accepted, m.rejected, m.emitted, m.skipped, m.conns)
}

// kafkaMetrics are the KafkaConsumer's self-observability.
type kafkaMetrics struct {
	accepted     prometheus.Counter
	unsigned     prometheus.Counter
	rejected     *prometheus.CounterVec // {reason}
	emitted      prometheus.Counter
	skipped      *prometheus.CounterVec // {reason}
	emitErrors   prometheus.Counter
	commitErrors prometheus.Counter
	missing      prometheus.Gauge
	owned        prometheus.Gauge
}

func newKafkaMetrics() *kafkaMetrics {
	return &kafkaMetrics{
		accepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spikehunt_alertintake_kafka_records_accepted_total",
			Help: "Records of the alerts topic decoded as spikehunt.alert/v1 documents.",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_alertintake_kafka_records_rejected_total",
			Help: "Records of the alerts topic refused, by reason: too_large, a signature that does not verify (unsigned, " +
				"bad_signature_header, unknown_key, bad_signature, stale_signature, future_signature) or a document that does not " +
				"decode (bad_json, unknown_schema, invalid). Nothing of them reaches the operator; their offsets are committed.",
		}, []string{"reason"}),
		unsigned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spikehunt_alertintake_kafka_records_unsigned_total",
			Help: "Records of the alerts topic let through without a signature because allow_unsigned (--alerts.allow-unsigned) is set.",
		}),
		emitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spikehunt_alertintake_kafka_alerts_emitted_total",
			Help: "Detector alerts handed to the operator.",
		}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spikehunt_alertintake_kafka_alerts_skipped_total",
			Help: "Valid detector alerts that yield nothing, by reason (resolved).",
		}, []string{"reason"}),
		emitErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spikehunt_alertintake_kafka_emit_errors_total",
			Help: "Polls whose alerts the operator did not take; each is retried with backoff before anything is committed.",
		}),
		commitErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spikehunt_alertintake_kafka_commit_errors_total",
			Help: "Failed offset commits; the records come again after a restart or rebalance (same Alert.Key).",
		}),
		missing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "spikehunt_alertintake_kafka_topic_missing",
			Help: "1 while the alerts topic does not exist (no detector has published yet, or it is misnamed): the consumer waits for it and consumes it once it exists; the webhooks are not affected.",
		}),
		owned: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "spikehunt_alertintake_kafka_partitions_owned",
			Help: "Partitions of the alerts topic the group assigned to this operator. 0 on the leader for more than a minute while the topic exists: another consumer in the same group takes the alerts, or the group cannot form (the log names the group's members).",
		}),
	}
}

func (m *kafkaMetrics) register(reg prometheus.Registerer) error {
	return registerAll(reg, m.accepted, m.unsigned, m.rejected, m.emitted, m.skipped, m.emitErrors, m.commitErrors, m.missing, m.owned)
}

func registerAll(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
