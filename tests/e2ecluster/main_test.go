//go:build linux

package e2ecluster

import (
	"fmt"
	"os"
	"testing"

	"github.com/spikehunt/spikehunt/tests/cluster"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestMain(m *testing.M) {
	// The chart's NetworkPolicies are enforced on the node
	// (networkpolicy_test.go), and the whole e2e runs under them.
	cluster.ConfigureShared(func(o *cluster.Options) { o.NetworkPolicy = true })
	code := m.Run()
	if err := cluster.StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	testenv.StopShared()
	os.Exit(code)
}
