//go:build !linux

package ftrace

import (
	"fmt"

	"github.com/spikehunt/spikehunt/agents/capture"
)

// ftrace is Linux's; elsewhere the backend exists so that the agent can
// report it as not supported.
type ftraceBackend struct{}

// New returns a backend whose Check and New report ErrNotSupported.
func New(cfg Config) capture.Backend { return ftraceBackend{} }

func (ftraceBackend) Name() string { return capture.Ftrace }

func (ftraceBackend) Check() error {
	return fmt.Errorf("%w: ftrace is Linux's tracer", capture.ErrNotSupported)
}

func (b ftraceBackend) New(capture.Spec, string) (capture.Recorder, error) { return nil, b.Check() }
