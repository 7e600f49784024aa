//go:build !linux

package capture

import (
	"os/exec"

	"github.com/spikehunt/spikehunt/agents/capture/artifact"
)

// govern is Linux-only; elsewhere (WPR on Windows) the recorder runs as
// the OS starts it and the governance record says so.
func govern(pid int, cpus []int, nice int, ioClass string) (artifact.Governance, error) {
	return artifact.Governance{}, nil
}

func startPinned(cmd *exec.Cmd, cpus []int) error { return cmd.Start() }
