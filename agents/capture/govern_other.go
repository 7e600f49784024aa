//go:build !linux

package capture

import (
	"os/exec"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

// govern is Linux-only; elsewhere (WPR on Windows) the recorder runs as
// the OS starts it and the governance record says so.
func govern(pid int, cpus []int, nice int, ioClass string) (record.Governance, error) {
	return record.Governance{}, nil
}

func startPinned(cmd *exec.Cmd, cpus []int) error { return cmd.Start() }
