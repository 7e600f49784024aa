// Package sim simulates a fleet of hosts as their agents would report it:
// per-request latency (sampled as the agent samples, with spikehunt.weight)
// and kernel counters (deltas over measured intervals), encoded with the
// agent's own OTLP encoders (agents/export) and sent to a Sink — the
// ingest's in-process source or Kafka — keyed by host.name. Simulated time
// runs as fast as the CPUs allow: hours of fleet in seconds.
//
// Each scenario (Scenarios) is a timing of stalls (none, per-host
// recurrent at its own phase, one bad host, fleet-wide synchronized, Poisson
// noise, a slow creep) and a cause (Causes) that says which kernel counters
// move while a stall lasts. Plan lays out the fleet and returns the ground
// truth the detectors are scored against (make eval). The same Config and
// Seed give the same messages, byte for byte, whatever the number of CPUs.
//
// Run owns its goroutines and returns when every host is sent; a Sink may
// block it (back-pressure) and must be safe for concurrent use.
package sim
