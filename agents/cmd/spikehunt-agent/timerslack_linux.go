package main

import (
	"io"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// applyTimerSlack gives every thread of the agent the timer slack of
// runtime.timer_slack (see RuntimeConfig). A thread can set only its own
// slack (another's needs CAP_SYS_NICE), new threads take their creator's,
// and execve(2) keeps it; but the runtime starts sysmon, the thread that
// matters, before main. So when this thread's slack is not the one asked
// for, main sets it and executes the agent again, with the same arguments,
// environment and process id; the new image's threads all descend from
// this one. The second run finds the slack set and goes on. Flag and
// config errors are left to run, which reports them.
func applyTimerSlack(args []string) {
	cfg, err := parseFlags(args, io.Discard)
	if err != nil || cfg.Runtime.TimerSlack <= 0 || cfg.Runtime.TimerSlack > maxTimerSlack {
		return
	}
	want := int(cfg.Runtime.TimerSlack.Nanoseconds())
	// The slack is per thread: set it on the thread that calls execve.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if cur, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0); err != nil || cur == want {
		return
	}
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(want), 0, 0, 0); err != nil {
		return
	}
	// Exec returns only on failure; the agent then runs with the kernel's
	// slack on every thread but this one, which is harmless.
	syscall.Exec("/proc/self/exe", os.Args, os.Environ())
}
