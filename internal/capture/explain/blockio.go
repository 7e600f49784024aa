package explain

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"sort"
	"strconv"
	"strings"
)

// BlockIO is what the ftrace profile's block events (block_rq_issue and
// block_rq_complete) say over a capture's window: each device's requests
// from issue to completion.
type BlockIO struct {
	Devices []DeviceIO `json:"devices"`
	// Unmatched counts completions whose issue the window did not hold
	// (issued before it), and issues still in flight at its end.
	UnmatchedCompletions uint64 `json:"unmatched_completions"`
	InFlightAtEnd        uint64 `json:"in_flight_at_end"`
	// Slow are the requests over SlowIO, longest first, at most MaxSlowIOs:
	// what a stalled request's wait can be held against.
	Slow []IOSpan `json:"slow"`
	// KeptDropped counts requests inside a window given to KeepDuring
	// that were not kept (past MaxKeptIOs): a wait held against the
	// devices may find them less busy than they were.
	KeptDropped uint64 `json:"kept_dropped,omitempty"`

	// windows are the spans whose every request is kept in kept, not
	// only the slow ones: the slow requests' waits, which many short
	// requests can fill.
	windows [][2]int64
	kept    []IOSpan
	byEnd   []IOSpan // Slow and kept by completion, built on first use after a read
}

// MaxKeptIOs bounds the requests KeepDuring keeps.
const MaxKeptIOs = 200_000

// KeepDuring asks ReadBlockIO to keep every request that overlaps
// [from, to) (trace nanoseconds), however short, for DeviceTimeOn and
// LastCompletionBefore. Call it before reading.
func (b *BlockIO) KeepDuring(from, to int64) {
	if to > from {
		b.windows = append(b.windows, [2]int64{from, to})
	}
}

func (b *BlockIO) inWindow(s IOSpan) bool {
	for _, w := range b.windows {
		if s.Issue < w[1] && s.End >= w[0] {
			return true
		}
	}
	return false
}

// DeviceIO is one device's requests, issue → complete.
type DeviceIO struct {
	Dev     string   `json:"dev"` // "major,minor" as the kernel prints it
	IOs     uint64   `json:"ios"`
	TotalNS uint64   `json:"total_ns"`
	MaxNS   uint64   `json:"max_ns"`
	Hist    []Bucket `json:"hist_us"` // log2 buckets of microseconds
	// P50US and P99US are Quantile(0.5) and Quantile(0.99), as the
	// tables print them.
	P50US uint64 `json:"p50_us"`
	P99US uint64 `json:"p99_us"`
}

// Quantile is the latency below which q of the device's requests
// completed, in µs, to its histogram bucket's upper bound.
func (d DeviceIO) Quantile(q float64) uint64 {
	var n uint64
	for _, b := range d.Hist {
		n += b.Count
	}
	want := uint64(math.Ceil(q * float64(n)))
	var seen uint64
	for _, b := range d.Hist {
		seen += b.Count
		if seen >= want && seen > 0 {
			return b.Hi
		}
	}
	return 0
}

// IOSpan is one block request: its device, direction, issue and
// completion in the trace's nanoseconds.
type IOSpan struct {
	Dev        string `json:"dev"`
	RWBS       string `json:"rwbs"`
	Sector     uint64 `json:"sector"`
	Issue, End int64
}

// flushSector keys the in-flight flush of a device.
const flushSector = ^uint64(0)

// Bounds on what ReadBlockIO keeps.
const (
	SlowIO      = 1_000_000 // ns: a request this long is kept in Slow
	MaxSlowIOs  = 10_000
	maxInFlight = 1 << 20
)

// ErrFtraceSyntax marks text that is not an ftrace trace.
var ErrFtraceSyntax = errors.New("explain: not ftrace trace text")

// ReadBlockIO reads the block events of ftrace trace text (a recorder's
// ftrace-pre.txt then ftrace-post.txt, in that order) into b. Lines of
// other events are skipped.
func (b *BlockIO) ReadBlockIO(r io.Reader) error {
	devs := map[string]*DeviceIO{}
	for i := range b.Devices {
		devs[b.Devices[i].Dev] = &b.Devices[i]
	}
	type key struct {
		dev    string
		sector uint64
	}
	inflight := map[key]IOSpan{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		issue := strings.Contains(line, ": block_rq_issue: ")
		if !issue && !strings.Contains(line, ": block_rq_complete: ") {
			continue
		}
		t, fields, err := ftraceTimeAndFields(line)
		if err != nil {
			return fmt.Errorf("%w: line %d: %v", ErrFtraceSyntax, n, err)
		}
		// issue:    254,0 RM 4096 () 21706864 + 8 [be,0,4] [bash]
		// complete: 254,0 RM () 21706864 + 8 [be,0,4] [0]
		f := strings.Fields(fields)
		plus := -1
		for i, x := range f {
			if x == "+" {
				plus = i
				break
			}
		}
		if len(f) < 4 || plus < 2 {
			return fmt.Errorf("%w: line %d: block fields %.80q", ErrFtraceSyntax, n, fields)
		}
		sector, err := strconv.ParseUint(f[plus-1], 10, 64)
		if err != nil {
			return fmt.Errorf("%w: line %d: sector %.20q", ErrFtraceSyntax, n, f[plus-1])
		}
		length := "0"
		if plus+1 < len(f) {
			length = f[plus+1]
		}
		if strings.HasPrefix(f[1], "FF") {
			// A flush has no sector: the kernel prints 0 at its issue
			// and all ones at its completion.
			sector = flushSector
		} else if length == "0" && !issue {
			// The flush sequence's second completion of a write that
			// asked for one (its data completed before the flush).
			continue
		}
		k := key{f[0], sector}
		if issue {
			if len(inflight) < maxInFlight {
				inflight[k] = IOSpan{Dev: f[0], RWBS: f[1], Sector: sector, Issue: t}
			}
			continue
		}
		s, ok := inflight[k]
		if !ok {
			b.UnmatchedCompletions++
			continue
		}
		delete(inflight, k)
		s.End = max(t, s.Issue)
		d := devs[s.Dev]
		if d == nil {
			d = &DeviceIO{Dev: s.Dev}
			devs[s.Dev] = d
		}
		ns := uint64(s.End - s.Issue)
		d.IOs++
		d.TotalNS += ns
		d.MaxNS = max(d.MaxNS, ns)
		d.Hist = addBucket(d.Hist, log2Bucket(ns/1000))
		if b.inWindow(s) {
			if len(b.kept) < MaxKeptIOs {
				b.kept = append(b.kept, s)
			} else {
				b.KeptDropped++
			}
		}
		if ns >= SlowIO {
			b.Slow = append(b.Slow, s)
			if len(b.Slow) > 2*MaxSlowIOs {
				b.trimSlow()
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: %v", ErrFtraceSyntax, err)
	}
	b.InFlightAtEnd = uint64(len(inflight))
	b.trimSlow()
	b.byEnd = nil
	b.Devices = make([]DeviceIO, 0, len(devs))
	for _, d := range devs {
		d.P50US, d.P99US = d.Quantile(0.5), d.Quantile(0.99)
		b.Devices = append(b.Devices, *d)
	}
	sort.Slice(b.Devices, func(i, j int) bool { return b.Devices[i].Dev < b.Devices[j].Dev })
	return nil
}

func (b *BlockIO) trimSlow() {
	sort.Slice(b.Slow, func(i, j int) bool { return b.Slow[i].End-b.Slow[i].Issue > b.Slow[j].End-b.Slow[j].Issue })
	if len(b.Slow) > MaxSlowIOs {
		b.Slow = b.Slow[:MaxSlowIOs]
	}
}

// log2Bucket is bpftrace's hist bucket of us: [0], [1], [2, 4), [4, 8) ...
func log2Bucket(us uint64) Bucket {
	if us < 2 {
		return Bucket{Lo: us, Hi: us + 1, Count: 1}
	}
	lo := uint64(1) << (bits.Len64(us) - 1)
	return Bucket{Lo: lo, Hi: lo * 2, Count: 1}
}

// DeviceTimeDuring is how much of [from, to) some request of the slow
// ones, or of those KeepDuring kept, was in flight on a device: the part
// of a wait the disk explains.
func (b *BlockIO) DeviceTimeDuring(from, to int64) int64 {
	return b.DeviceTimeOn(nil, [][2]int64{{from, to}})
}

// DeviceTimeOn is how much of the spans (trace nanoseconds, not
// overlapping each other) some request on one of devs (nil: any device)
// was in flight, counting the slow requests and those KeepDuring kept.
// It merges the requests into busy intervals once, then walks the spans
// along them: a request's thousands of blocked stretches cost no more
// than one pass.
func (b *BlockIO) DeviceTimeOn(devs map[string]bool, spans [][2]int64) int64 {
	var busy [][2]int64
	for _, list := range [][]IOSpan{b.Slow, b.kept} {
		for _, s := range list {
			if (devs == nil || devs[s.Dev]) && s.End > s.Issue {
				busy = append(busy, [2]int64{s.Issue, s.End})
			}
		}
	}
	sort.Slice(busy, func(i, j int) bool { return busy[i][0] < busy[j][0] })
	merged := busy[:0]
	for _, iv := range busy {
		if n := len(merged); n > 0 && iv[0] <= merged[n-1][1] {
			merged[n-1][1] = max(merged[n-1][1], iv[1])
			continue
		}
		merged = append(merged, iv)
	}
	ws := append([][2]int64(nil), spans...)
	sort.Slice(ws, func(i, j int) bool { return ws[i][0] < ws[j][0] })
	var total int64
	j := 0
	for _, w := range ws {
		for j < len(merged) && merged[j][1] <= w[0] {
			j++
		}
		for k := j; k < len(merged) && merged[k][0] < w[1]; k++ {
			if z, a := min(merged[k][1], w[1]), max(merged[k][0], w[0]); z > a {
				total += z - a
			}
		}
	}
	return total
}

// ftraceTimeAndFields reads "<comm>-<pid> [cpu] flags <sec>.<usec>: event:
// fields" and returns the time in ns and the fields after the event name.
func ftraceTimeAndFields(line string) (int64, string, error) {
	ev := strings.Index(line, ": block_rq_")
	if ev < 0 {
		return 0, "", errors.New("no block event")
	}
	head := line[:ev]
	sp := strings.LastIndexByte(head, ' ')
	t, err := parseTime(head[sp+1:])
	if err != nil {
		return 0, "", err
	}
	_, fields, _ := strings.Cut(line[ev+2:], ": ")
	return t, fields, nil
}

// LastCompletionBefore is the device of the request that completed last in
// [t-within, t], among the slow requests and those KeepDuring kept: the
// completion that woke a thread at t, when its wait was for a block
// request (a stacked device's completes after the one beneath it, so it
// is the one the waiter was held by).
func (b *BlockIO) LastCompletionBefore(t, within int64) (string, bool) {
	if b.byEnd == nil {
		b.byEnd = make([]IOSpan, 0, len(b.Slow)+len(b.kept))
		b.byEnd = append(append(b.byEnd, b.Slow...), b.kept...)
		sort.Slice(b.byEnd, func(i, j int) bool {
			x, y := b.byEnd[i], b.byEnd[j]
			return x.End < y.End || x.End == y.End && x.Dev < y.Dev
		})
	}
	i := sort.Search(len(b.byEnd), func(i int) bool { return b.byEnd[i].End > t }) - 1
	if i < 0 || b.byEnd[i].End < t-within {
		return "", false
	}
	return b.byEnd[i].Dev, true
}

// Verdict is the block IO of the window in one sentence: the device with
// the slowest request, its count and p99.
func (b *BlockIO) Verdict() string {
	if b == nil || len(b.Devices) == 0 {
		return ""
	}
	d := b.Devices[0]
	for _, x := range b.Devices {
		if x.MaxNS > d.MaxNS {
			d = x
		}
	}
	return fmt.Sprintf("block device %s: %d requests, p99 under %d µs, slowest %.1f ms", d.Dev, d.IOs, d.Quantile(0.99), float64(d.MaxNS)/1e6)
}
