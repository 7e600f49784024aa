//go:build !linux

package perf

import (
	"fmt"

	"github.com/spikehunt/spikehunt/agents/capture"
)

type perfBackend struct{}

// New returns a backend that reports perf as unsupported: perf is
// Linux's profiler (WPR is the Windows one).
func New(Config) capture.Backend { return perfBackend{} }

func (perfBackend) Name() string { return capture.Perf }

func (perfBackend) Check() error {
	return fmt.Errorf("%w: perf is Linux's profiler", capture.ErrNotSupported)
}

func (b perfBackend) New(capture.Spec, string) (capture.Recorder, error) { return nil, b.Check() }
