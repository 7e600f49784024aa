//go:build !linux

package capture

import "fmt"

type perfBackend struct{}

// NewPerf returns a backend that reports perf as unsupported: perf is
// Linux's profiler (WPR is the Windows one).
func NewPerf(PerfConfig) Backend { return perfBackend{} }

func (perfBackend) Name() string { return Perf }

func (perfBackend) Check() error { return fmt.Errorf("%w: perf is Linux's profiler", ErrNotSupported) }

func (b perfBackend) New(Spec, string) (Recorder, error) { return nil, b.Check() }
