//go:build !unix

package intake

import "time"

var processStart = time.Now()

// processCPU stands in with wall time where getrusage is missing.
func processCPU() time.Duration { return time.Since(processStart) }
