// Package alertintake turns outside alerts into the operator's normalized Alert
// (docs/design.md §7): spikehunt.alert/v1 documents from the
// spikehunt.alerts Kafka topic (KafkaConsumer), and Grafana alerting and
// Alertmanager notifications posted to an HTTPS webhook (Webhook). Both
// hand what they accept to a Sink; the controllers own what happens next.
//
// Each source is a pure decoder of untrusted bytes (decodeDetectorAlert,
// decodeGrafana, decodeAlertmanager: fuzzed) plus a thin wrapper that owns
// the I/O. Alert.Policy and PolicySink map an Alert onto the Alert of
// internal/policy, as that package documents. Authentication
// happens before a body is parsed:
//
//   - Grafana: hex HMAC-SHA256 of "<timestamp>:<body>" with the contact
//     point's secret in X-Grafana-Alerting-Signature, the Unix-seconds
//     timestamp in the header the contact point names (see GrafanaConfig),
//     accepted within ±ReplayWindow of now and at most once.
//   - Alertmanager: "Authorization: Bearer <token>".
//   - Kafka: each record's HMAC-SHA256 signature by one of the detector's
//     keys (KafkaConfig.KeysDir; internal/alertdoc/schema.md "Signatures"),
//     made within MaxSignatureAge, checked before the document is parsed.
//     Without keys the consumer does not start unless AllowUnsigned.
//
// The webhook never listens without authentication: Validate requires an
// endpoint with its secret or token, and TLS. The Grafana replay guard is
// in memory, so a new leader (or a restarted operator) starts with it
// empty; to leave no replay window across the change, the webhook refuses
// with 503 every Grafana request signed before it started serving, which
// Grafana retries with a fresh signature.
//
// Refused requests get 401 (authentication), 400 (malformed body), 413
// (body too large), 405 (method) or 503 (the sink did not take the alerts
// in time, or a Grafana request signed before this webhook started), and
// in each case nothing reaches the Sink. Every refusal, every poison or
// forged record and every alert that yields nothing (resolved, no service
// label) is counted with a reason; rejected requests and records are
// logged at debug level only, so that a flood cannot fill the log.
//
// # Lifecycle hazards
//
//   - Sink.Emit is called concurrently: once per webhook request, from the
//     HTTP server's goroutines, and from the goroutine running
//     KafkaConsumer.Run. The slice passed to Emit belongs to the sink.
//   - Delivery is at least once. A Kafka record is committed only after the
//     sink took its alert, so a crash or a rebalance between the two hands
//     it on again; a webhook sender retries after a 503 or a lost response.
//     Deduplicate on Alert.Key.
//   - KafkaConsumer owns a franz-go client; Run closes it when it returns.
//     Call Run once, and only in the replica that holds the leader lease (a
//     manager Runnable that needs leader election): a standby member of the
//     group would take partitions and commit alerts that its idle
//     controllers never act on. The same holds for the webhook behind a
//     Service that spreads requests over replicas: serve it from the leader
//     only, or have the sink record alerts where the leader sees them.
//   - Secrets are read once by NewWebhook and the TLS key pair once by
//     Serve: rotating either takes a new Webhook (a restart of the operator).
package alertintake
