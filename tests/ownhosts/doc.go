// Package ownhosts holds the test of the README's "Your own hosts" path:
// it runs the README's own shell blocks on this machine (the pinned Kafka
// through deploy/kafka.sh, serve-clickhouse, ingest and detect, and two
// agents standing for two hosts), induces a stall on both and finds it
// with the README's own `spikehunt spikes`. Only its _test.go files hold
// code.
package ownhosts
