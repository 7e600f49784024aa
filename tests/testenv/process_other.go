//go:build !linux

package testenv

import (
	"os/exec"
	"syscall"
)

// childProcAttr: outside Linux there is no Pdeathsig and no portable process
// group in syscall, so a crashed test binary can leave children behind.
func childProcAttr() *syscall.SysProcAttr { return nil }

// signalGroup signals only the child itself outside Linux.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) error {
	return cmd.Process.Signal(sig)
}
