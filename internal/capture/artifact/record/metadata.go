// Package record is a capture artifact's record: the Metadata every
// capture leaves beside its files, its checks (CheckSealed, DecodeMetadata)
// and its stored encoding, and the name rule every id and file obeys. It
// imports only the standard library: the control API's wire types carry a
// record, and a program that drives an agent holds no store client.
package record

import "time"

// Metadata is the record every capture leaves next to its files
// (docs/design.md §6): enough to find the capture again by its spike window and
// to know how far to trust it. It is written once, as JSON, and never
// changed: the artifact store refuses to overwrite it.
type Metadata struct {
	Version int       `json:"version"` // MetadataVersion
	ID      string    `json:"id"`
	Host    string    `json:"host"`
	Node    string    `json:"node,omitempty"`
	HWClass string    `json:"hw_class,omitempty"`
	Backend string    `json:"backend"`
	Profile string    `json:"profile,omitempty"`
	Script  string    `json:"script,omitempty"`
	Service string    `json:"service,omitempty"`
	ArmedAt time.Time `json:"armed_at"`
	FiredAt time.Time `json:"fired_at"`
	// WindowStart and WindowEnd are the wall-clock window the capture
	// covers: [fire − pre, fire + post], clipped to when it was armed.
	WindowStart time.Time `json:"window_start"`
	WindowEnd   time.Time `json:"window_end"`
	Trigger     FireCause `json:"trigger"`
	Files       []File    `json:"files"`
	// Requests names the file of per-request records inside the window
	// (requests.jsonl), one of Files; empty when none were seen.
	Requests string `json:"requests,omitempty"`
	Bytes    int64  `json:"bytes"` // sum of Files
	Lost     uint64 `json:"lost_events"`
	Overruns uint64 `json:"overrun_events"`
	Clock    Clock  `json:"clock"`
	// Checksum is the sha256 of the files' checksums in order, so one
	// value pins the whole artifact.
	Checksum string   `json:"checksum"`
	Notes    []string `json:"notes,omitempty"`
	// Findings summarize the analysis made on the node (explain.json),
	// when the recorder makes one: what the captures index keeps next to
	// the spike.
	Findings *Findings `json:"findings,omitempty"`
	// Governance records how the recorder ran: where it was pinned, its
	// nice level, why it was aborted if it was.
	Governance Governance `json:"governance"`
}

// MetadataVersion is bumped on an incompatible change of Metadata.
const MetadataVersion = 1

// Findings are an analysis's answer in a few fields.
type Findings struct {
	// Verdict is the slowest explained request's one-line verdict
	// ("blocked 998 ms in do_nanosleep …; woken by its timer …"), empty
	// when no request at or above the trigger had a thread to follow.
	Verdict string `json:"verdict"`
	// BlockingStack is that request's longest blocking call chain,
	// innermost first, joined with " ← ".
	BlockingStack string `json:"blocking_stack,omitempty"`
	// HottestCPU is the CPU whose samples in the window were least idle
	// (-1: no busy sample; explain.Busiest), and HottestCPUBusy the share
	// of its samples that were not idle.
	HottestCPU     int     `json:"hottest_cpu"`
	HottestCPUBusy float64 `json:"hottest_cpu_busy"`
	// SoftirqShare is the share of the window's samples, over every CPU,
	// that ran softirq work (__do_softirq / handle_softirqs in the chain).
	SoftirqShare float64 `json:"softirq_share"`
}

// File is one file of an artifact, addressed by its content.
type File struct {
	Name   string `json:"name"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// FireCause says what fired a capture.
type FireCause struct {
	Kind string `json:"kind"` // "latency", "p99", "remote", "manual"
	// For a local trigger: the request that crossed the line.
	Service   string        `json:"service,omitempty"`
	Endpoint  string        `json:"endpoint,omitempty"`
	Latency   time.Duration `json:"latency_ns,omitempty"`
	RequestAt time.Time     `json:"request_end,omitempty"`
	TraceID   string        `json:"trace_id,omitempty"`
	// Reason is free text from a remote or manual fire ("alert 1234").
	Reason string `json:"reason,omitempty"`
}

// Governance is how a recorder was kept from loading the host.
type Governance struct {
	CPUs    []int  `json:"cpus,omitempty"`
	Nice    int    `json:"nice"`
	IOClass string `json:"io_class,omitempty"`
	Aborted string `json:"aborted,omitempty"`
}

// Clock maps a tool's timestamps to wall-clock time: wall = ts + Offset.
type Clock struct {
	Name   string        `json:"name"` // "CLOCK_MONOTONIC", "wall", "QPC"
	Offset time.Duration `json:"offset_ns"`
}

// RequestRecord is one line of an artifact's requests.jsonl (Metadata.Requests):
// a request the agent saw inside the capture's window.
type RequestRecord struct {
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	LatencyMS float64   `json:"latency_ms"`
	Service   string    `json:"service"`
	Endpoint  string    `json:"endpoint"`
	Status    string    `json:"status,omitempty"`
	ThreadID  uint32    `json:"thread_id,omitempty"`
	TraceID   string    `json:"trace_id,omitempty"`
	SpanID    string    `json:"span_id,omitempty"`
	Weight    uint32    `json:"weight"`
}
