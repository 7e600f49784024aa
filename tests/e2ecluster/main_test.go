//go:build linux

package e2ecluster

import (
	"fmt"
	"os"
	"testing"

	"github.com/spikehunt/spikehunt/tests/cluster"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// twoNodes is the two-node run (make e2e-cluster-2): the shared cluster
// has a second node, and only twonodes_test.go's test runs on it.
var twoNodes = os.Getenv(cluster.TwoNodesEnv) == "1"

func TestMain(m *testing.M) {
	cluster.ConfigureShared(func(o *cluster.Options) {
		if twoNodes {
			// No NetworkPolicy engine: it enforces on the first node's
			// network namespace alone, and the nodes masquerade each
			// other's pods (tests/cluster/README.md, "More nodes").
			o.Nodes = []cluster.NodeOptions{cluster.SecondNode()}
			return
		}
		// The chart's NetworkPolicies are enforced on the node
		// (networkpolicy_test.go), and the whole e2e runs under them.
		o.NetworkPolicy = true
	})
	code := m.Run()
	if err := cluster.StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	testenv.StopShared()
	os.Exit(code)
}
