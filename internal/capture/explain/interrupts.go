package explain

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// Interrupts is what the irq_duration bpftrace script's interval blocks
// (agents/capture/bpftrace/scripts/irq_duration.bt) say over a capture's
// window: per CPU, how long its softirq and hardirq handlers ran, how many
// ran past 100 µs, and which softirq vectors took the time.
type Interrupts struct {
	// Intervals are the blocks read; Seconds the time they cover (from
	// the first block's start, a second before it printed, to the last
	// one's end).
	Intervals int      `json:"intervals"`
	Seconds   float64  `json:"seconds"`
	CPUs      []CPUIrq `json:"cpus"`
	// Vectors are each CPU's softirq vectors, most time first.
	Vectors []VectorTime `json:"vectors"`
	// HardirqsOver100 are the IRQ lines with handlers past 100 µs, most first.
	HardirqsOver100 []IRQCount `json:"hardirqs_over_100us"`
	Truncated       int        `json:"truncated_blocks"` // blocks the recorder marked as having lost lines
}

// CPUIrq is one CPU's interrupt work over the window.
type CPUIrq struct {
	CPU            int      `json:"cpu"`
	SoftirqRuns    uint64   `json:"softirq_runs"`
	SoftirqNS      uint64   `json:"softirq_ns"` // exact, from @softirq_ns
	SoftirqOver100 uint64   `json:"softirq_over_100us"`
	SoftirqHist    []Bucket `json:"softirq_hist_us"`
	HardirqRuns    uint64   `json:"hardirq_runs"`
	HardirqOver100 uint64   `json:"hardirq_over_100us"`
	HardirqHist    []Bucket `json:"hardirq_hist_us"`
	// CPUShare is Share over the window, and Over100Share the share of
	// the softirq runs past 100 µs, as the tables print them.
	CPUShare     float64 `json:"softirq_cpu_share"`
	Over100Share float64 `json:"softirq_over_100us_share"`
}

// Share is the CPU's time in softirq work over the window.
func (c CPUIrq) Share(seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return float64(c.SoftirqNS) / (seconds * 1e9)
}

// Bucket is one histogram bucket: durations in [Lo, Hi) µs.
type Bucket struct {
	Lo, Hi uint64
	Count  uint64
}

// VectorTime is one softirq vector on one CPU.
type VectorTime struct {
	CPU     int    `json:"cpu"`
	Vec     int    `json:"vec"`
	Name    string `json:"name"`
	NS      uint64 `json:"ns"`
	Runs    uint64 `json:"runs"`
	Over100 uint64 `json:"over_100us"`
}

// IRQCount is one IRQ line's handlers past 100 µs on one CPU.
type IRQCount struct {
	CPU   int    `json:"cpu"`
	IRQ   int    `json:"irq"`
	Count uint64 `json:"count"`
}

// SoftirqNames are the kernel's softirq vectors by number.
var SoftirqNames = []string{"HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU"}

func vecName(v int) string {
	if v >= 0 && v < len(SoftirqNames) {
		return SoftirqNames[v]
	}
	return "vec" + strconv.Itoa(v)
}

// maxIrqCPUs bounds the CPU numbers a block may name.
const maxIrqCPUs = 8192

// ErrIrqSyntax marks text that is not the irq_duration script's blocks.
var ErrIrqSyntax = errors.New("explain: not irq_duration output")

// ReadIrqBlocks adds the blocks of one bpftrace file (bpftrace-pre.txt or
// bpftrace-post.txt) to in.
func (in *Interrupts) ReadIrqBlocks(r io.Reader) error {
	cpus := map[int]*CPUIrq{}
	for i := range in.CPUs {
		cpus[in.CPUs[i].CPU] = &in.CPUs[i]
	}
	vecs := map[[2]int]*VectorTime{}
	for i := range in.Vectors {
		v := &in.Vectors[i]
		vecs[[2]int{v.CPU, v.Vec}] = v
	}
	irqs := map[[2]int]uint64{}
	for _, c := range in.HardirqsOver100 {
		irqs[[2]int{c.CPU, c.IRQ}] += c.Count
	}
	cpu := func(n int) (*CPUIrq, error) {
		if n < 0 || n >= maxIrqCPUs {
			return nil, fmt.Errorf("CPU %d", n)
		}
		c := cpus[n]
		if c == nil {
			c = &CPUIrq{CPU: n}
			cpus[n] = c
		}
		return c, nil
	}
	vec := func(c, v int) *VectorTime {
		x := vecs[[2]int{c, v}]
		if x == nil {
			x = &VectorTime{CPU: c, Vec: v, Name: vecName(v)}
			vecs[[2]int{c, v}] = x
		}
		return x
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	var (
		hist      *[]Bucket // the histogram whose buckets follow
		histRuns  *uint64
		firstMono int64
		lastMono  int64
		n         int
	)
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "# received"):
			continue
		case strings.HasPrefix(line, "# truncated"):
			in.Truncated++
			continue
		case strings.HasPrefix(line, "#"):
			continue
		case strings.HasPrefix(line, "=== spikehunt interval "):
			hist = nil
			f := strings.Fields(line)
			if len(f) >= 6 && f[4] == "begin" {
				mono, err := strconv.ParseInt(f[5], 10, 64)
				if err != nil || mono < 0 {
					return fmt.Errorf("%w: line %d: %q", ErrIrqSyntax, n, line)
				}
				if firstMono == 0 {
					firstMono = mono
				}
				lastMono = mono
				in.Intervals++
			}
			continue
		case strings.HasPrefix(line, "["):
			if hist == nil {
				return fmt.Errorf("%w: line %d: a histogram bucket outside a histogram: %.80q", ErrIrqSyntax, n, line)
			}
			b, err := parseBucket(line)
			if err != nil {
				return fmt.Errorf("%w: line %d: %v", ErrIrqSyntax, n, err)
			}
			*hist = addBucket(*hist, b)
			*histRuns += b.Count
			continue
		case !strings.HasPrefix(line, "@"):
			return fmt.Errorf("%w: line %d: %.80q", ErrIrqSyntax, n, line)
		}
		hist = nil
		name, keys, value, err := parseMapLine(line)
		if err != nil {
			return fmt.Errorf("%w: line %d: %v", ErrIrqSyntax, n, err)
		}
		if len(keys) == 0 {
			continue // a map this analysis does not read
		}
		c, err := cpu(keys[0])
		if err != nil {
			return fmt.Errorf("%w: line %d: %v", ErrIrqSyntax, n, err)
		}
		switch {
		case name == "@softirq_us" && value < 0:
			hist, histRuns = &c.SoftirqHist, &c.SoftirqRuns
		case name == "@hardirq_us" && value < 0:
			hist, histRuns = &c.HardirqHist, &c.HardirqRuns
		case value < 0:
		case name == "@softirq_over_100us" && len(keys) == 2:
			c.SoftirqOver100 += uint64(value)
			vec(keys[0], keys[1]).Over100 += uint64(value)
		case name == "@hardirq_over_100us" && len(keys) == 2:
			c.HardirqOver100 += uint64(value)
			irqs[[2]int{keys[0], keys[1]}] += uint64(value)
		case name == "@softirq_ns" && len(keys) == 2:
			c.SoftirqNS += uint64(value)
			vec(keys[0], keys[1]).NS += uint64(value)
		case name == "@softirq_runs" && len(keys) == 2:
			vec(keys[0], keys[1]).Runs += uint64(value)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: %v", ErrIrqSyntax, err)
	}
	// Each block is the second before its mono time.
	if firstMono > 0 {
		in.Seconds += float64(lastMono-firstMono)/1e9 + 1
	}
	// New slices: the maps point into the old ones.
	in.CPUs = make([]CPUIrq, 0, len(cpus))
	for _, c := range cpus {
		in.CPUs = append(in.CPUs, *c)
	}
	sort.Slice(in.CPUs, func(i, j int) bool { return in.CPUs[i].CPU < in.CPUs[j].CPU })
	in.Vectors = make([]VectorTime, 0, len(vecs))
	for _, v := range vecs {
		in.Vectors = append(in.Vectors, *v)
	}
	sort.Slice(in.Vectors, func(i, j int) bool {
		a, b := in.Vectors[i], in.Vectors[j]
		if a.NS != b.NS {
			return a.NS > b.NS
		}
		return a.CPU < b.CPU || a.CPU == b.CPU && a.Vec < b.Vec
	})
	in.HardirqsOver100 = make([]IRQCount, 0, len(irqs))
	for k, n := range irqs {
		in.HardirqsOver100 = append(in.HardirqsOver100, IRQCount{CPU: k[0], IRQ: k[1], Count: n})
	}
	sort.Slice(in.HardirqsOver100, func(i, j int) bool {
		a, b := in.HardirqsOver100[i], in.HardirqsOver100[j]
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		return a.CPU < b.CPU || a.CPU == b.CPU && a.IRQ < b.IRQ
	})
	return nil
}

// parseMapLine reads "@name[k1, k2]: value" (value -1 when the line opens
// a histogram, "@name[k]:" alone) and "@name: value" (no keys).
func parseMapLine(line string) (string, []int, int64, error) {
	head, val, ok := strings.Cut(line, ":")
	if !ok {
		return "", nil, 0, fmt.Errorf("no ':' in %.80q", line)
	}
	value := int64(-1)
	if v := strings.TrimSpace(val); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return "", nil, 0, fmt.Errorf("value %.40q", v)
		}
		value = n
	}
	name, rest, hasKeys := strings.Cut(head, "[")
	if !hasKeys {
		return name, nil, value, nil
	}
	rest, ok = strings.CutSuffix(rest, "]")
	if !ok {
		return "", nil, 0, fmt.Errorf("keys of %.80q", line)
	}
	var keys []int
	for _, k := range strings.Split(rest, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(k))
		if err != nil {
			return name, nil, value, nil // keys that are not numbers: not a map this reads
		}
		keys = append(keys, n)
	}
	return name, keys, value, nil
}

// parseBucket reads "[2, 4)   17 |@@@   |", "[0]  5 |@|" or "[1K, 2K) 3 |…|".
func parseBucket(line string) (Bucket, error) {
	end := strings.IndexAny(line, ")]")
	if end < 0 {
		return Bucket{}, fmt.Errorf("bucket %.60q", line)
	}
	bounds := strings.Split(line[1:end], ",")
	lo, err := sizeValue(bounds[0])
	if err != nil {
		return Bucket{}, err
	}
	hi := lo + 1
	if len(bounds) == 2 {
		if hi, err = sizeValue(bounds[1]); err != nil {
			return Bucket{}, err
		}
	}
	f := strings.Fields(line[end+1:])
	if len(f) == 0 {
		return Bucket{}, fmt.Errorf("bucket without a count: %.60q", line)
	}
	n, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return Bucket{}, fmt.Errorf("bucket count %.20q", f[0])
	}
	return Bucket{Lo: lo, Hi: hi, Count: n}, nil
}

// sizeValue reads bpftrace's bucket bounds: "4", "1K", "2M" (powers of 1024).
func sizeValue(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	mult := uint64(1)
	for i, suffix := range []string{"K", "M", "G", "T"} {
		if strings.HasSuffix(s, suffix) {
			s, mult = strings.TrimSuffix(s, suffix), 1<<(10*(i+1))
			break
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > 1<<40 {
		return 0, fmt.Errorf("bucket bound %q", s)
	}
	return n * mult, nil
}

// addBucket adds b to hist, merging with a bucket of the same bounds.
func addBucket(hist []Bucket, b Bucket) []Bucket {
	for i := range hist {
		if hist[i].Lo == b.Lo && hist[i].Hi == b.Hi {
			hist[i].Count += b.Count
			return hist
		}
	}
	hist = append(hist, b)
	sort.Slice(hist, func(i, j int) bool { return hist[i].Lo < hist[j].Lo })
	return hist
}

// Verdict is the interrupt work in one sentence: the CPU and vector that
// took the most, and what ran past 100 µs.
func (in *Interrupts) Verdict() string {
	if in.Seconds <= 0 || len(in.Vectors) == 0 {
		return "no softirq work was recorded in the window"
	}
	v := in.Vectors[0]
	var over, runs uint64
	for _, c := range in.CPUs {
		over += c.SoftirqOver100
		runs += c.SoftirqRuns
	}
	s := fmt.Sprintf("%s softirq took %.0f%% of CPU %d over the %.0f s window (%d runs)", v.Name,
		100*float64(v.NS)/(in.Seconds*1e9), v.CPU, in.Seconds, v.Runs)
	if runs > 0 {
		s += fmt.Sprintf("; %d of %d softirq runs on all CPUs (%.2f%%) lasted over 100 µs", over, runs, 100*float64(over)/float64(runs))
	}
	return s
}

// Findings sums the interrupt work up for the captures index: the CPU
// with the most softirq time, its share, and the share over all cpus CPUs.
func (in *Interrupts) Findings(cpus int) (f struct {
	HottestCPU   int
	HottestShare float64
	SoftirqShare float64
}) {
	f.HottestCPU = -1
	var total uint64
	for _, c := range in.CPUs {
		total += c.SoftirqNS
		if sh := c.Share(in.Seconds); f.HottestCPU < 0 || sh > f.HottestShare {
			f.HottestCPU, f.HottestShare = c.CPU, sh
		}
	}
	if in.Seconds > 0 && cpus > 0 {
		f.SoftirqShare = float64(total) / (in.Seconds * 1e9 * float64(cpus))
	}
	return f
}
