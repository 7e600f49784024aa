// Package otlpwire writes the OTLP export requests that every product puts
// on the wire: the agent's spans and kernel counters, byte for byte as the
// agent sends them, and the same bytes for the simulator, the demo and the
// tests that must produce what agents produce. SpanEncoder appends a
// traces request without building pdata; EncodeMetrics goes through pdata
// (metrics are a few hundred points a second per host, not a hot path).
//
// One SpanEncoder serves one goroutine: its scratch slices are reused.
package otlpwire
