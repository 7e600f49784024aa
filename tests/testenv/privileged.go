package testenv

import (
	"os"
	"testing"
)

// RequirePrivilegedEnv names the variable that turns RequirePrivileged's
// skips into failures. CI machines that have the kernel features and root
// set it to 1, so that a test cannot pass there by skipping.
const RequirePrivilegedEnv = "SPIKEHUNT_REQUIRE_PRIVILEGED"

// RequirePrivileged ends a test that cannot run because the kernel or the
// machine lacks feature (perf events, tracefs, BPF, root): it skips t, or
// fails it when SPIKEHUNT_REQUIRE_PRIVILEGED=1. reason is what the probe for
// the feature returned.
//
// A skip is only for a missing kernel feature or privilege. A component of
// our own that is missing (`make deps` not run, a broker that does not start)
// is a failure, never a skip.
func RequirePrivileged(t testing.TB, feature string, reason error) {
	t.Helper()
	if os.Getenv(RequirePrivilegedEnv) == "1" {
		t.Fatalf("%s is required (%s=1) but unavailable: %v", feature, RequirePrivilegedEnv, reason)
	}
	t.Skipf("%s unavailable, skipping (set %s=1 to fail instead): %v", feature, RequirePrivilegedEnv, reason)
}
