// Package perf is the perf flight recorder: `perf record --overwrite
// --switch-output=signal` into a ring per CPU, dumped by a signal at Fire
// and again at Collect. It implements capture.Backend; the agent's cmd
// constructs it and hands it to the engine.
package perf

import (
	"github.com/spikehunt/spikehunt/agents/capture"
)

// Config configures the perf flight recorder.
type Config struct {
	// Binary is the perf executable; "" finds "perf" on PATH.
	Binary   string
	Profiles *capture.Profiles
}
