// Package soak is `make soak`: the whole loop (agent binaries, a simulated
// fleet of 1,000 hosts' agent output, three KRaft brokers over TLS,
// `spikehunt ingest`, the embedded store behind `spikehunt
// serve-clickhouse` and `spikehunt detect --every 30s`) run for
// SOAK_MINUTES (30 by default) under a schedule of named faults: a
// broker's kill -9, the ingest's kill -9, the store's restart, the store's
// volume full, an agent's spool volume full and a wall-clock step on one
// node. It prints BENCH soak.* lines (rows lost and duplicated, each
// process's RSS drift, the detector's lag) and fails when one misses its
// target (docs/soak.md). Its test skips unless SPIKEHUNT_SOAK=1; only its
// _test.go files hold code.
package soak
