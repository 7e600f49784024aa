// Package otlpwire writes the OTLP export requests that every product puts
// on the wire: the agent's spans and kernel counters, byte for byte as the
// agent sends them, and the same bytes for the simulator, the demo and the
// tests that must produce what agents produce. SpanEncoder appends a
// traces request without building pdata, and EncodeMetrics a metrics
// request (a node's cgroups alone add hundreds of points a second); each
// is held to its pdata form (Traces, Metrics) by a test.
//
// One SpanEncoder serves one goroutine: its scratch slices are reused.
package otlpwire
