package testenv_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestRequirePrivileged(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "privileged" {
		testenv.RequirePrivileged(t, "perf cpu-clock events", errors.New("perf_event_open: permission denied"))
		t.Error("RequirePrivileged returned; want the test ended")
		return
	}
	tests := []struct {
		name     string
		env      string
		wantPass bool
		want     []string
	}{
		{"skips when privileged tests are optional", "", true,
			[]string{"--- SKIP", "perf cpu-clock events unavailable", "permission denied", "SPIKEHUNT_REQUIRE_PRIVILEGED=1"}},
		{"skips when the variable is not exactly 1", "SPIKEHUNT_REQUIRE_PRIVILEGED=true", true,
			[]string{"--- SKIP"}},
		{"fails when privileged tests are required", "SPIKEHUNT_REQUIRE_PRIVILEGED=1", false,
			[]string{"--- FAIL", "perf cpu-clock events is required", "permission denied"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := runChild(t, "TestRequirePrivileged", "privileged", tt.env)
			if passed := err == nil; passed != tt.wantPass {
				t.Errorf("child passed = %v, want %v (err %v)", passed, tt.wantPass, err)
			}
			if !containsAll(out, tt.want...) {
				t.Errorf("child output lacks %q:\n%s", tt.want, out)
			}
		})
	}
}

// runChild runs one test of this test binary in a new process with
// TESTENV_CHILD=mode, for tests whose subject ends the test (t.Fatal, t.Skip).
func runChild(t *testing.T, test, mode string, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "TESTENV_CHILD="+mode, "SPIKEHUNT_REQUIRE_PRIVILEGED=")
	for _, e := range env {
		if e != "" {
			cmd.Env = append(cmd.Env, e)
		}
	}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run child test %s: %v", test, err)
	}
	return string(out), err
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
