// Package detectsvc is the detect service around the detectors: what
// `spikehunt detect --every` does besides a pass. It publishes each pass's
// alerts through an outbox that survives a missing topic and a restart
// (AlertOutbox), says on /healthz when passes are overdue (Health), writes
// each pass's own figures to the counters table (PassCounters) and prints
// its one-line summary (Summary). The passes themselves are
// pipelines/services/detect's; the command's flags and its HTTP server
// stay in pipelines/cmd/spikehunt, which wires these together.
package detectsvc
