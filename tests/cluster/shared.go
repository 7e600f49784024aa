//go:build linux

package cluster

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// shared is the node of a test binary: Shared starts it on first use and
// StopShared stops it.
var shared struct {
	once    sync.Once
	c       *Cluster
	err     error
	mu      sync.Mutex
	stopped bool
	options func(*Options)
}

// ConfigureShared sets what Shared changes in DefaultOptions before it
// starts the node, for example o.NetworkPolicy = true. Call it from
// TestMain before m.Run.
func ConfigureShared(f func(o *Options)) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.options = f
}

// TwoNodesEnv names the variable that runs the two-node tests
// (SPIKEHUNT_E2E_CLUSTER_2=1, as make e2e-cluster-2 sets it); without it
// they skip, and make test stays within its budget.
const TwoNodesEnv = "SPIKEHUNT_E2E_CLUSTER_2"

// KeepLogsEnv names the variable that keeps the shared node's logs after
// StopShared (SPIKEHUNT_CLUSTER_KEEP_LOGS=1); their folder is printed at
// start.
const KeepLogsEnv = "SPIKEHUNT_CLUSTER_KEEP_LOGS"

// Shared returns the test binary's node, starting it with DefaultOptions
// (as ConfigureShared changed them) on first use (1-2 minutes on 2 loaded cores). A test that is not root
// ends through testenv.RequirePrivileged: skipped, or failed under
// SPIKEHUNT_REQUIRE_PRIVILEGED=1. Any other start error fails t, and every
// later call fails the same way without trying again.
//
// Tests share the node: give each its own namespace.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	shared.mu.Lock()
	stopped := shared.stopped
	shared.mu.Unlock()
	if stopped {
		t.Fatal("cluster: Shared called after StopShared")
	}
	shared.once.Do(func() {
		opts := DefaultOptions()
		opts.KeepLogs = os.Getenv(KeepLogsEnv) == "1"
		shared.mu.Lock()
		if shared.options != nil {
			shared.options(&opts)
		}
		shared.mu.Unlock()
		shared.c, shared.err = Start(context.Background(), opts)
	})
	if errors.Is(shared.err, ErrNotPrivileged) {
		testenv.RequirePrivileged(t, "a Kubernetes node", shared.err)
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.c
}

// StopShared stops the node Shared started, if any. Call it from TestMain
// after m.Run and fail the binary on its error: it is how a test binary
// learns that the node left something behind.
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		if err := cluster.StopShared(); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			code = 1
//		}
//		os.Exit(code)
//	}
func StopShared() error {
	shared.mu.Lock()
	shared.stopped = true
	shared.mu.Unlock()
	shared.once.Do(func() {})
	if shared.c == nil {
		return nil
	}
	return shared.c.Stop()
}
