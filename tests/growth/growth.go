// Package growth is the arithmetic and the memory readings of `make
// bench-scale`: how a stage's cost grows with the fleet (the slope of a
// least-squares line through log(size), log(cost)), where that line
// crosses a budget, and the peak resident memory of the process doing the
// work. Standard library only, so any package's benchmarks may take it.
//
// Peak memory is the kernel's VmHWM (the high-water mark of the resident
// set), which counts everything the process maps: the Go heap, and the
// embedded ClickHouse engine's allocations, which Go's runtime metrics do
// not see. ResetPeak sets the mark back to the current resident set
// (writing 5 to /proc/<pid>/clear_refs, Linux 4.0 or later), so a
// benchmark can read the peak of the measured work alone, not of the
// loading before it.
package growth

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
)

// Fit is a power law cost = Coef · size^Exponent, fitted by least squares
// on the logarithms of both.
type Fit struct {
	Exponent float64
	Coef     float64
}

// ErrTooFewSizes is returned by FitPowerLaw when fewer than two distinct
// sizes are given: a slope needs two points.
var ErrTooFewSizes = errors.New("growth: at least two distinct sizes are needed for a slope")

// FitPowerLaw fits cost = c · size^k through the points (sizes[i],
// costs[i]) by ordinary least squares on (ln size, ln cost). Every size and
// cost must be positive. Exponent 1 is linear growth; 2 is quadratic.
func FitPowerLaw(sizes, costs []float64) (Fit, error) {
	if len(sizes) != len(costs) {
		return Fit{}, fmt.Errorf("growth: %d sizes but %d costs", len(sizes), len(costs))
	}
	var sx, sy float64
	n := float64(len(sizes))
	for i := range sizes {
		if sizes[i] <= 0 || costs[i] <= 0 || math.IsNaN(costs[i]) || math.IsInf(costs[i], 0) {
			return Fit{}, fmt.Errorf("growth: point %d (%g, %g): sizes and costs must be positive and finite", i, sizes[i], costs[i])
		}
		sx += math.Log(sizes[i])
		sy += math.Log(costs[i])
	}
	mx, my := sx/n, sy/n
	var sxx, sxy float64
	for i := range sizes {
		dx := math.Log(sizes[i]) - mx
		sxx += dx * dx
		sxy += dx * (math.Log(costs[i]) - my)
	}
	if sxx == 0 {
		return Fit{}, ErrTooFewSizes
	}
	k := sxy / sxx
	return Fit{Exponent: k, Coef: math.Exp(my - k*mx)}, nil
}

// At is the fitted cost at size.
func (f Fit) At(size float64) float64 { return f.Coef * math.Pow(size, f.Exponent) }

// SizeAt is the size at which the fitted cost reaches budget as the size
// grows: +Inf when the cost falls with size (exponent < 0: what it costs
// is fixed overhead) or is flat under the budget, 0 when it is flat over
// it.
func (f Fit) SizeAt(budget float64) float64 {
	switch {
	case f.Exponent < 0, f.Exponent == 0 && f.Coef <= budget:
		return math.Inf(1)
	case f.Exponent == 0:
		return 0
	}
	return math.Pow(budget/f.Coef, 1/f.Exponent)
}

// ResetPeak sets the process's peak resident memory (VmHWM) back to its
// resident memory now; pid 0 is this process.
func ResetPeak(pid int) error {
	path := procPath(pid, "clear_refs")
	if err := os.WriteFile(path, []byte("5"), 0); err != nil {
		return fmt.Errorf("reset the peak RSS through %s (Linux ≥ 4.0, own process or root): %w", path, err)
	}
	return nil
}

// PeakMiB is the process's peak resident memory (VmHWM) in MiB since it
// started or since the last ResetPeak; pid 0 is this process.
func PeakMiB(pid int) (float64, error) {
	return statusMiB(pid, "VmHWM")
}

// RSSMiB is the process's resident memory (VmRSS) now, in MiB.
func RSSMiB(pid int) (float64, error) {
	return statusMiB(pid, "VmRSS")
}

func statusMiB(pid int, field string) (float64, error) {
	path := procPath(pid, "status")
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	return parseStatusKiB(b, field)
}

// parseStatusKiB reads field (a "Name:  123 kB" line of
// /proc/<pid>/status) in MiB.
func parseStatusKiB(status []byte, field string) (float64, error) {
	for _, line := range strings.Split(string(status), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || name != field {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("status field %s: %q is not \"<n> kB\"", field, rest)
		}
		kb, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("status field %s: %w", field, err)
		}
		return kb / 1024, nil
	}
	return 0, fmt.Errorf("no %s line in the process status (not Linux?)", field)
}

func procPath(pid int, file string) string {
	if pid == 0 {
		return "/proc/self/" + file
	}
	return fmt.Sprintf("/proc/%d/%s", pid, file)
}

// Children are the processes whose parent is pid (0: this process), such
// as the API server and etcd envtest starts: their CPU is the stage's cost
// too when the work is theirs.
func Children(pid int) ([]int, error) {
	if pid == 0 {
		pid = os.Getpid()
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(procPath(child, "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		if ppid, ok := parseStatPPID(b); ok && ppid == pid {
			out = append(out, child)
		}
	}
	return out, nil
}

// parseStatPPID reads the parent's pid from a /proc/<pid>/stat line: the
// field after the state, which follows the command name in parentheses
// (a name may hold spaces and parentheses: the last ')' ends it).
func parseStatPPID(stat []byte) (int, bool) {
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}
