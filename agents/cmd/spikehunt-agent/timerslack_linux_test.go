package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The agent executes itself once with the slack set, so that every
// thread, sysmon included, runs with runtime.timer_slack; 0 leaves the
// slack it was started with. procfs shows only the main thread's slack:
// that is the thread that executed the agent, and the one every other
// thread descends from.
func TestTheAgentRunsWithItsTimerSlack(t *testing.T) {
	own := readSlack(t, "/proc/self/timerslack_ns")
	for _, tc := range []struct {
		name string
		args []string
		want int64
	}{
		{"by default, 1ms", nil, 1_000_000},
		{"as configured", []string{"--runtime.timer-slack", "3ms"}, 3_000_000},
		{"0 keeps the slack it was started with", []string{"--runtime.timer-slack", "0"}, own},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// No broker: the agent starts without one.
			p := startAgent(t, []string{"127.0.0.1:1"}, t.TempDir(), tc.args...)
			if got := readSlack(t, fmt.Sprintf("/proc/%d/timerslack_ns", p.cmd.Process.Pid)); got != tc.want {
				t.Errorf("timer slack %d ns, want %d", got, tc.want)
			}
		})
	}
}

func readSlack(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
