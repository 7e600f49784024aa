// Package alerts turns a detector pass into the alerts spikehunt publishes
// on the spikehunt.alerts topic (docs/design.md §3): one JSON document per group
// of new spike windows of a service, and one per pattern that appeared,
// changed materially or resolved. Documents follow a versioned schema
// (schema.md, alert.schema.json), are keyed by service, and carry a stable
// alert_id so that a consumer recognizes a re-send.
//
// The decision is a pure function, Decide: a State (what was published
// before) and a Pass (what the detectors found) in, the alerts to send and
// the next State out. It deduplicates (a spike window or an unchanged
// pattern is never sent twice) and rate-limits spike-group alerts per
// service with a token bucket; windows held back are folded into the
// service's next spike-group alert, never dropped silently.
//
// Publisher wraps Decide with a Sink, a clock and Prometheus metrics.
// KafkaSink writes to Kafka (franz-go, idempotent, acks=all) and signs
// each record when given an alertsig.Signer (schema.md, "Signatures"), so
// that the operator can tell the detector's alerts from anyone else's;
// MemorySink and SinkFunc serve the embedded demo and tests, in process,
// where there is nothing to sign.
//
// # Lifecycle hazards
//
//   - A Publisher's State lives in memory. To survive a restart without
//     re-sending, persist Publisher.State after each Publish (it is plain
//     JSON) and pass it to Restore before the first Publish of the new
//     process; without a saved state, LoadState rebuilds one from the
//     patterns and spikes tables (see its doc for what that cannot know).
//   - Publish is at least once: alerts the sink refused stay in the State's
//     outbox and are sent again, with the same alert_id, by the next
//     Publish.
//   - A KafkaSink owns a franz-go client: Close it.
package alerts
