package telemetry

// The agent's own figures, which it sends in its metric stream beside the
// kernel counters, so that the pipeline-health dashboard charts them from
// the counters table like any host's counters (docs/pipeline-health.md).
// The OTel semantic conventions have no names for an agent's drops, spool
// or capture budget, hence spikehunt.*. The
// fleet simulator (pipelines/lab/sim) emits the same names for its hosts.
const (
	// MetricRequestsDropped counts requests the intake dropped (a delta),
	// by AttrDropReason: queue_full, too_large, the line protocol's and
	// the span checks' reasons. A request left out by sampling is not a
	// drop: its kept peers carry its weight.
	MetricRequestsDropped = "spikehunt.agent.requests.dropped"
	// MetricSpoolBytes is the outage spool's backlog (a gauge): the bytes
	// of records not yet acknowledged by the destination. 0 while the
	// destination keeps up.
	MetricSpoolBytes = "spikehunt.agent.spool.bytes"
	// MetricExportRecords counts export requests handed to the sink (a
	// delta), by AttrSignal: spans or metrics. A record sent again after
	// a restart counts again.
	MetricExportRecords = "spikehunt.agent.export.records"
	// MetricCaptureActive is how many captures are armed or recording now
	// (a gauge), what the host's budget counts; sent only by an agent
	// whose capture engine runs.
	MetricCaptureActive = "spikehunt.capture.active"
	// MetricCaptureMaxConcurrent is that budget (a gauge).
	MetricCaptureMaxConcurrent = "spikehunt.capture.max_concurrent"

	// AttrDropReason is why a request was dropped; the ingest files it
	// in the counters' mode column.
	AttrDropReason = "spikehunt.drop.reason"
	// AttrSignal is an export request's signal, spans or metrics; mode
	// column too.
	AttrSignal = "spikehunt.signal"
)

// The values of AttrSignal.
const (
	SignalSpans   = "spans"
	SignalMetrics = "metrics"
)
