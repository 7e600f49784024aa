// Package testenv runs the real components spikehunt's tests talk to: a
// single-node KRaft Kafka broker, a kube-apiserver with etcd (through
// controller-runtime's envtest) and an S3 API server (s3proxy). Nothing
// here is a mock. The components are installed by `make deps`
// (deps/install.sh); Paths finds them.
//
// # One of each per test binary
//
// On 2 cores a broker takes 3-5 s to start and up to 512 MiB of heap, the
// API server 3-5 s, s3proxy 2-3 s and up to 256 MiB, so a test package
// shares one of each: SharedKafka, SharedAPIServer and S3 start them on
// first use and StopShared stops them. Every package that uses them needs
// a TestMain that calls StopShared:
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		testenv.StopShared()
//		os.Exit(code)
//	}
//
// os.Exit skips deferred calls, hence the order. SharedSecureKafka is a
// broker of its own with a SASL_SSL listener as well (kafka_secure.go),
// started only by the tests of TLS and SASL; its start costs the same. StartKafka and
// StartAPIServer give a test its own instance when it must not share one
// (for example to Restart the broker while other tests run in parallel).
// StartKafkaCluster (kafka_cluster.go) runs three brokers, 1.5 GiB of heap
// at most and 10-20 s to start, never shared: a test that kills, stops
// or fills a node owns the cluster.
//
// Why one package: every component here is a child process that must die
// with the test binary and say why it would not start, and they share
// the machinery for it (process groups, Pdeathsig, the reaper, bounded
// logs, free ports); the single broker and the cluster share the Kafka
// node's configuration, JVM arguments and test CA too. Split, that
// machinery would be exported only for one another, and a test would
// import one package per component of the same environment.
//
// # Lifecycle hazards
//
//   - Who stops what: the caller of StartKafka calls Kafka.Stop; StartAPIServer
//     stops its server in t.Cleanup; StopShared stops the shared ones. Stop
//     removes the component's temporary folder, data included.
//   - A test binary that dies without stopping them (panic, go test -timeout,
//     SIGKILL) still takes them down on Linux: the broker's and s3proxy's
//     JVMs have Pdeathsig set, and etcd and kube-apiserver, which envtest
//     starts without it, are killed by a small /bin/sh reaper that waits for
//     the test binary's end. Pdeathsig fires when the OS thread that started
//     the JVM exits, which in Go happens only after runtime.LockOSThread
//     without an unlock; do not call SharedKafka, StartKafka or S3 from such
//     a goroutine. A cluster's nodes have both: Pdeathsig and the reaper.
//   - Ports are picked free by binding 127.0.0.1:0 and closing the listener,
//     so another process can take one before the broker binds it; the window
//     is the JVM start. Restart reuses the same ports, with the same race
//     while the broker is down. A lost race fails the start with the broker
//     log, it does not hang.
//   - Restart is visible to every client of the broker. Clients reconnect on
//     their own; records produced meanwhile are retried by franz-go.
//   - Shared components carry state across tests: use a topic, group or
//     namespace of the test's own.
//   - `go test ./...` runs test binaries in parallel; each one that uses
//     Kafka starts its own broker, so memory adds up.
//   - VisitPage starts a Chromium of its own (Debian's, from PATH) for one
//     page, bounded to two minutes, and closes it before it returns; a
//     machine without one skips through RequirePrivileged.
//   - The broker's output is kept in memory (Kafka.Log, the newest 4 MiB);
//     SharedKafka prints its tail when a test fails.
package testenv
