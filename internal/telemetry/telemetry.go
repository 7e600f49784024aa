// Package telemetry holds the two things the agent observes, in the form
// every part of the agent passes around: a kernel counter's delta over a
// measured interval (Point) and one served request (Request). Samplers and
// the intake produce them; the exporter turns them into OTLP.
package telemetry

import "time"

// Point is one counter's change over a measured interval. Start and End are
// wall-clock times derived from the monotonic clock at the two readings, so
// that Value / End.Sub(Start) is a true rate even when a tick ran late.
//
// A Point whose Start equals End is a reading of a level at that instant
// (slab bytes, the spool's backlog): a gauge. The exporter sends it as an
// OTLP Gauge, and the ingest stores it with interval_ms = 0. Gauge builds
// one.
type Point struct {
	// Metric follows the OTel system semantic conventions where a name
	// exists (system.cpu.time, system.network.packet.count, …) and is
	// spikehunt.* otherwise.
	Metric string
	Unit   string // UCUM: "s", "{packet}", "{interrupt}", "By", "{operation}"
	Start  time.Time
	End    time.Time
	Value  float64 // the delta over [Start, End], never negative; a gauge's level
	Attrs  []Attr  // ordered; keys follow semconv (cpu.logical_number, cpu.mode, network.interface.name, …)
}

// Gauge is the reading v of a level at t.
func Gauge(metric, unit string, t time.Time, v float64, attrs ...Attr) Point {
	return Point{Metric: metric, Unit: unit, Start: t, End: t, Value: v, Attrs: attrs}
}

// IsGauge reports whether p is a reading of a level rather than a delta.
func (p *Point) IsGauge() bool { return p.Start.Equal(p.End) }

// Attr is one attribute: Value is a string or an int64.
type Attr struct {
	Key   string
	Value any
}

// Str and Int build attributes.
func Str(k, v string) Attr       { return Attr{Key: k, Value: v} }
func Int(k string, v int64) Attr { return Attr{Key: k, Value: v} }

// Request is one served request as the agent keeps it after sampling.
type Request struct {
	Service  string
	Endpoint string // route or span name
	Start    time.Time
	Duration time.Duration
	// Status is the HTTP status code when there is one ("503"), else the
	// OTel span status ("OK", "ERROR", "UNSET").
	Status   string
	TraceID  [16]byte // zero when the app sent none
	SpanID   [8]byte
	ThreadID uint32
	// Weight is 1/sampling rate: how many requests this one stands for.
	// Slow requests are always kept with weight 1.
	Weight uint32
}

// Resource describes the host every exported record comes from
// (docs/design.md §3): host.name, k8s.node.name, spikehunt.hw_class.
type Resource struct {
	HostName string
	NodeName string
	HWClass  string
}

// UntilTick is how long from now until the next tick of a period-d task,
// in (0, d]. Every periodic task of the agent (the exporter's drain, the
// sampling passes, the spool's fsync) ticks on one grid, the whole
// multiples of its period on the wall clock, so that tasks due at the
// same time wake the process once: at the agent's load a wake-up costs
// more than most of the work it does. A task re-arms its timer with
// UntilTick after each tick, which also keeps it on the grid when it runs
// late. A step of the wall clock only shifts the next tick.
func UntilTick(now time.Time, d time.Duration) time.Duration {
	return now.Truncate(d).Add(d).Sub(now)
}
