//go:build !linux

package capture

import "fmt"

// bpftrace is Linux's; elsewhere the backend exists so that the agent can
// report it as not supported.
type bpftraceBackend struct{}

// NewBpftrace returns a backend whose Check and New report ErrNotSupported.
func NewBpftrace(cfg BpftraceConfig) Backend { return bpftraceBackend{} }

func (bpftraceBackend) Name() string { return Bpftrace }

func (bpftraceBackend) Check() error {
	return fmt.Errorf("%w: bpftrace is Linux's tracer", ErrNotSupported)
}

func (b bpftraceBackend) New(Spec, string) (Recorder, error) { return nil, b.Check() }
