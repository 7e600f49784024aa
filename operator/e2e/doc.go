// Package e2e holds the platform's full-loop test (make e2e): a
// detector alert on Kafka reaches the operator on a real API server, which
// arms a Capture on a node; that node's agent runs the real perf flight
// recorder on this machine, fires it on its own latency stream, uploads
// the artifact to a real S3 server, and the operator indexes it against
// the spike the detector found in the same requests.
//
// It lives under operator/ rather than tests/e2e because it drives the
// operator's controllers and alert intake in-process, and Go lets only
// code under operator/ import operator/internal/...; tests/e2e/README.md
// points here. The package has no code of its own: this file and
// _test.go files only, so nothing may import it.
//
// Everything at a boundary is real (docs/design.md §9): the Kafka broker,
// kube-apiserver and etcd (envtest), the embedded ClickHouse engine,
// s3proxy, and perf as root. Only the transport from the agent to the
// ingest is the in-process source of the embedded default, as in
// `spikehunt demo`. The test needs root and perf; without them it skips,
// or fails under SPIKEHUNT_REQUIRE_PRIVILEGED=1.
package e2e
