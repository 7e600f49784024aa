package perf

import (
	"github.com/spikehunt/spikehunt/agents/capture"
)

// PerfConfig configures the perf flight recorder.
type PerfConfig struct {
	// Binary is the perf executable; "" finds "perf" on PATH.
	Binary   string
	Profiles *capture.Profiles
}
