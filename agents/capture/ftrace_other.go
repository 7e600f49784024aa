//go:build !linux

package capture

import "fmt"

// ftrace is Linux's; elsewhere the backend exists so that the agent can
// report it as not supported.
type ftraceBackend struct{}

// NewFtrace returns a backend whose Check and New report ErrNotSupported.
func NewFtrace(cfg FtraceConfig) Backend { return ftraceBackend{} }

func (ftraceBackend) Name() string { return Ftrace }

func (ftraceBackend) Check() error {
	return fmt.Errorf("%w: ftrace is Linux's tracer", ErrNotSupported)
}

func (b ftraceBackend) New(Spec, string) (Recorder, error) { return nil, b.Check() }
