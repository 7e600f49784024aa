//go:build !linux

package bpftrace

import (
	"fmt"

	"github.com/spikehunt/spikehunt/agents/capture"
)

// bpftrace is Linux's; elsewhere the backend exists so that the agent can
// report it as not supported.
type bpftraceBackend struct{}

// New returns a backend whose Check and New report ErrNotSupported.
func New(cfg Config) capture.Backend { return bpftraceBackend{} }

func (bpftraceBackend) Name() string { return capture.Bpftrace }

func (bpftraceBackend) Check() error {
	return fmt.Errorf("%w: bpftrace is Linux's tracer", capture.ErrNotSupported)
}

func (b bpftraceBackend) New(capture.Spec, string) (capture.Recorder, error) { return nil, b.Check() }
