// Package ownhosts holds the test of the README's "Your own hosts" path:
// it runs the README's own shell blocks on this machine (the pinned Kafka
// through deploy/kafka.sh, serve-clickhouse, ingest and detect, and two
// agents standing for two hosts), induces a stall on both and finds it
// with the README's own `spikehunt spikes`. It also boots this machine's
// systemd as PID 1 of its own PID, mount and network namespaces, installs
// deploy/systemd's units as the README says, and checks that they find a
// stall and restart a crashed ingest. Only its _test.go files hold code.
package ownhosts
