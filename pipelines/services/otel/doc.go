// Package otel holds the gateway OpenTelemetry Collector: its builder
// manifest (builder-config.yaml, built by `deps/install.sh otelcol` into
// spikehunt-otelcol) and its configuration (config.yaml). Apps without a
// spikehunt agent send OTLP to it; it writes the same Kafka topics, in the
// same otlp_proto encoding, keyed by host.name, as the agents do. The Go
// code here is only the test that proves it. The build also carries the
// filter processor and the OTLP exporter, which the gateway does not use:
// the node Collector example (helm/spikehunt/examples/collector) tees
// request spans to the agent with them, and its test runs this build.
package otel
