package vocab

// Capture backends: the flight recorders an agent runs (docs/design.md
// §6). The Capture API's spec.profile.backend, the agent's engine and the
// artifact's record all carry these names.
const (
	BackendPerf     = "perf"
	BackendFtrace   = "ftrace"
	BackendBpftrace = "bpftrace"
	BackendWPR      = "wpr"
)

// Backends are every backend, in the order the API lists them.
var Backends = []string{BackendPerf, BackendFtrace, BackendBpftrace, BackendWPR}
