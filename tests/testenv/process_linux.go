package testenv

import (
	"errors"
	"os/exec"
	"syscall"
)

// childProcAttr puts a child in its own process group, so that stopping it
// can signal everything it started, and asks the kernel to SIGKILL it when
// the thread that started it dies. Go threads only die when a goroutine
// locked to one (runtime.LockOSThread) exits without unlocking; Pdeathsig
// fires then too, so start children from ordinary goroutines.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalGroup sends sig to the process group led by cmd's process. A group
// that is already gone is not an error.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) error {
	err := syscall.Kill(-cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}
