// Package causelab is `make causes`: the everyday stall causes induced for
// real on this machine's kernel — CFS throttling of the app's cgroup, a
// noisy neighbour on its CPU, reclaim in its memory cgroup, a TCP listen
// queue overflow, a lock held in the app — each run through the whole
// platform (tests/shopapp with the OTel SDK → spikehunt-agent with its
// kernel samplers and perf → Kafka → ingest → the embedded store →
// detect → `spikehunt suspects`, and the capture's verdict), and scored
// on whether the top suspect and the verdict name the cause
// (docs/causes.md). Its test skips unless SPIKEHUNT_CAUSELAB=1: it takes a
// quarter of an hour, root, cgroup v1 and perf.
package causelab
