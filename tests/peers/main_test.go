// Package peers measures spikehunt against what a user would run instead,
// on the same load, the same machine and the same Kafka broker, and
// prints the ratios (docs/benchmarks.md). It holds benchmarks only, run
// by `make bench-peers`; they start real processes (spikehunt-agent built
// from this tree, the stock Collector of `deps/install.sh otelcol-peers`,
// node_exporter of `deps/install.sh node-exporter`) and a Kafka broker
// (tests/testenv), and stop them all before the test binary ends.
package peers

import (
	"os"
	"testing"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopShared()
	os.Exit(code)
}
