// Package bpftrace is the bpftrace flight recorder: a named script from
// an administrator's root-owned folder (scripts/ holds the shipped ones)
// whose interval summaries the agent keeps in a ring of its own. It
// implements capture.Backend; the agent's cmd constructs it.
package bpftrace

import (
	"bytes"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Config configures the bpftrace flight recorder.
type Config struct {
	// ScriptDir is the allow-list: a capture names a script, and only
	// ScriptDir/<name>.bt can run. The agent runs these as root, so the
	// folder and its scripts must be owned by root and not writable by
	// group or others, nor may the folders above it be (the backend
	// checks, and refuses with the fix); a symlink may point inside the
	// folder, never out of it.
	ScriptDir string
	// Binary is the bpftrace executable; "" finds "bpftrace" on PATH.
	Binary string
	// MaxBytes bounds the output kept in memory: the pre-window ring
	// and the post-window each hold at most this much. 0 is
	// DefaultBpftraceMaxBytes. Raise it only for scripts whose intervals
	// are large (per-CPU maps on hundreds of CPUs).
	MaxBytes int
	// StopGrace is how long bpftrace may take to print its last
	// interval and exit after SIGINT before it is killed; 0 is 5 s.
	StopGrace time.Duration
}

// Bounds and defaults of Config.
const (
	DefaultBpftraceMaxBytes = 16 << 20
	MinBpftraceMaxBytes     = 64 << 10
	MaxBpftraceMaxBytes     = 1 << 30
	MaxBpftraceScriptBytes  = 1 << 20
	defaultBpftraceGrace    = 5 * time.Second
)

func (c Config) validate() error {
	if c.MaxBytes != 0 && (c.MaxBytes < MinBpftraceMaxBytes || c.MaxBytes > MaxBpftraceMaxBytes) {
		return fmt.Errorf("bpftrace: max bytes %d is outside [%d, %d]", c.MaxBytes, MinBpftraceMaxBytes, MaxBpftraceMaxBytes)
	}
	if c.StopGrace < 0 {
		return fmt.Errorf("bpftrace: negative stop grace %v", c.StopGrace)
	}
	return nil
}

// File names a bpftrace recorder leaves in its dir, besides a copy of the
// script it ran (bpftrace-<name>.bt).
const (
	BpftracePreFile  = "bpftrace-pre.txt"
	BpftracePostFile = "bpftrace-post.txt"
)

// The output contract of an allow-listed script: every interval (a
// second) it prints its maps between two marker lines and clears them,
//
//	=== spikehunt interval <n> begin <CLOCK_MONOTONIC ns>
//	…
//	=== spikehunt interval <n> end
//
// and in END it prints the last, partial interval the same way. The
// recorder keeps whole blocks; it never parses what is between markers.
const bpftraceMarker = "=== spikehunt interval "

// bpftraceMarkerLine reads a marker line: the interval's number, whether
// it begins or ends a block, and for a begin the CLOCK_MONOTONIC time the
// script printed it at (the end of the interval it covers).
func bpftraceMarkerLine(line []byte) (n, mono int64, begin, ok bool) {
	rest, found := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte(bpftraceMarker))
	if !found {
		return 0, 0, false, false
	}
	f := bytes.Fields(rest)
	if len(f) < 2 {
		return 0, 0, false, false
	}
	n, err := strconv.ParseInt(string(f[0]), 10, 64)
	if err != nil || n < 0 {
		return 0, 0, false, false
	}
	switch {
	case len(f) == 3 && string(f[1]) == "begin":
		mono, err = strconv.ParseInt(string(f[2]), 10, 64)
		if err != nil || mono < 0 {
			return 0, 0, false, false
		}
		return n, mono, true, true
	case len(f) == 2 && string(f[1]) == "end":
		return n, 0, false, true
	}
	return 0, 0, false, false
}

// bpftraceLostLine reads bpftrace's "Lost 12 events": its output ring
// overflowed and printf or print events never reached it.
func bpftraceLostLine(line []byte) (uint64, bool) {
	f := bytes.Fields(line)
	if len(f) != 3 || string(f[0]) != "Lost" || string(f[2]) != "events" {
		return 0, false
	}
	n, err := strconv.ParseUint(string(f[1]), 10, 64)
	return n, err == nil
}

// bpftraceAttachingLine reads "Attaching 6 probes..." (or "1 probe..."),
// which bpftrace prints just before it attaches them.
func bpftraceAttachingLine(line []byte) (int, bool) {
	f := bytes.Fields(line)
	if len(f) != 3 || string(f[0]) != "Attaching" || (string(f[2]) != "probes..." && string(f[2]) != "probe...") {
		return 0, false
	}
	n, err := strconv.Atoi(string(f[1]))
	return n, err == nil && n > 0
}

// bpftraceBlock is one interval of a script's output.
type bpftraceBlock struct {
	N    int64
	Mono int64 // CLOCK_MONOTONIC ns from the begin marker
	// Received is the agent's wall clock when the end marker arrived.
	Received time.Time
	Text     []byte // the lines between the markers
	// Truncated says the block lost lines: it outgrew its share of
	// memory, or it ended without its end marker.
	Truncated bool
}

func (b *bpftraceBlock) size() int { return len(b.Text) + 128 }

// bpftraceFlight is the decoder of bpftrace's stdout and the flight
// recorder's memory: a ring of the latest interval blocks, covering at
// least the pre-window, until fire; the blocks after it until the end.
// Lines go in from the goroutine reading bpftrace; fire and finish come
// from the recorder's. Line does not keep the slice it is given.
type bpftraceFlight struct {
	mu       sync.Mutex
	pre      time.Duration
	maxBytes int
	now      func() time.Time

	open      *bpftraceBlock
	ring      []bpftraceBlock
	ringBytes int
	fired     bool
	post      []bpftraceBlock
	postBytes int

	attaching chan struct{} // closed at "Attaching N probes..."
	firstMark chan struct{} // closed at the first interval marker
	probes    int

	lost      uint64 // bpftrace's own "Lost N events"
	dropped   int    // whole blocks not kept, to stay within maxBytes
	truncated int    // blocks that lost lines
	stray     int    // lines outside any block that were not bpftrace's
}

func newBpftraceFlight(pre time.Duration, maxBytes int, now func() time.Time) *bpftraceFlight {
	return &bpftraceFlight{
		pre: pre, maxBytes: maxBytes, now: now,
		attaching: make(chan struct{}), firstMark: make(chan struct{}),
	}
}

// Line takes one line of bpftrace's output; cut says it was longer than
// the reader's buffer and is only its start.
func (f *bpftraceFlight) Line(line []byte, cut bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n, mono, begin, ok := bpftraceMarkerLine(line); ok && !cut {
		f.markSeen()
		switch {
		case begin:
			if f.open != nil {
				f.open.Truncated = true
				f.closeBlock()
			}
			f.open = &bpftraceBlock{N: n, Mono: mono}
		case f.open != nil && f.open.N == n:
			f.closeBlock()
		default:
			f.stray++
		}
		return
	}
	if n, ok := bpftraceLostLine(line); ok {
		f.lost += n
		return
	}
	if n, ok := bpftraceAttachingLine(line); ok {
		select {
		case <-f.attaching:
		default:
			f.probes = n
			close(f.attaching)
		}
		return
	}
	if f.open == nil {
		if len(bytes.TrimSpace(line)) > 0 {
			f.stray++
		}
		return
	}
	// One block may take a quarter of the budget: a ring always holds a
	// few, and one runaway print cannot evict the whole window.
	if len(f.open.Text)+len(line)+1 > f.maxBytes/4 {
		f.open.Truncated = true
		return
	}
	if cut {
		f.open.Truncated = true
	}
	f.open.Text = append(f.open.Text, bytes.TrimRight(line, "\n")...)
	f.open.Text = append(f.open.Text, '\n')
}

// AddLost counts a "Lost N events" bpftrace printed elsewhere (stderr).
func (f *bpftraceFlight) AddLost(n uint64) {
	f.mu.Lock()
	f.lost += n
	f.mu.Unlock()
}

func (f *bpftraceFlight) markSeen() {
	select {
	case <-f.firstMark:
	default:
		close(f.firstMark)
	}
}

// closeBlock stamps the open block and files it. Caller holds mu.
func (f *bpftraceFlight) closeBlock() {
	b := *f.open
	f.open = nil
	b.Received = f.now()
	if b.Truncated {
		f.truncated++
	}
	if f.fired {
		// The post-window keeps its oldest blocks: they are the ones
		// next to the spike.
		if f.postBytes+b.size() > f.maxBytes {
			f.dropped++
			return
		}
		f.post = append(f.post, b)
		f.postBytes += b.size()
		return
	}
	f.ring = append(f.ring, b)
	f.ringBytes += b.size()
	f.trim(b.Received)
}

// trim ages out blocks the pre-window no longer needs — all but the
// newest one received at or before now−pre, which covers the window's
// start — and then drops the oldest while the ring is over its budget.
// Caller holds mu.
func (f *bpftraceFlight) trim(now time.Time) {
	start := now.Add(-f.pre)
	for len(f.ring) >= 2 && !f.ring[1].Received.After(start) {
		f.drop()
	}
	for len(f.ring) >= 2 && f.ringBytes > f.maxBytes {
		f.drop()
		f.dropped++
	}
}

func (f *bpftraceFlight) drop() {
	f.ringBytes -= f.ring[0].size()
	f.ring[0] = bpftraceBlock{}
	f.ring = f.ring[1:]
}

// Fire ends the pre-window: it returns the ring's blocks, which the
// caller then owns, and files every later block in the post-window.
func (f *bpftraceFlight) Fire() []bpftraceBlock {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trim(f.now())
	out := f.ring
	f.ring, f.ringBytes, f.fired = nil, 0, true
	return out
}

// bpftraceTally is what a flight counted besides its blocks.
type bpftraceTally struct {
	Lost                      uint64
	Dropped, Truncated, Stray int
	// Unprinted are the interval numbers missing just before the
	// post-window's last block: bpftrace's interval probe ran, but on
	// SIGINT it printed its END block without draining that interval's
	// output first (seen on a starved machine).
	Unprinted []int64
}

// Finish ends the post-window once bpftrace's output has ended: a block
// left open is kept as truncated. It returns the post-window's blocks,
// which the caller then owns, and the tally.
func (f *bpftraceFlight) Finish() ([]bpftraceBlock, bpftraceTally) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.open != nil {
		f.open.Truncated = true
		f.closeBlock()
	}
	out := f.post
	f.post, f.postBytes = nil, 0
	t := bpftraceTally{Lost: f.lost, Dropped: f.dropped, Truncated: f.truncated, Stray: f.stray}
	if n := len(out); n >= 2 {
		for m := out[n-2].N + 1; m < out[n-1].N; m++ {
			t.Unprinted = append(t.Unprinted, m)
		}
	}
	return out, t
}

// appendBpftraceBlocks renders blocks as the files show them: the
// script's markers around each block, with the agent's wall-clock
// arrival time under the begin marker.
func appendBpftraceBlocks(dst []byte, blocks []bpftraceBlock) []byte {
	for _, b := range blocks {
		dst = fmt.Appendf(dst, "%s%d begin %d\n", bpftraceMarker, b.N, b.Mono)
		dst = fmt.Appendf(dst, "# received %s\n", b.Received.UTC().Format(time.RFC3339Nano))
		if b.Truncated {
			dst = append(dst, "# truncated: this block lost lines (over its memory share, or bpftrace stopped inside it)\n"...)
		}
		dst = append(dst, b.Text...)
		dst = fmt.Appendf(dst, "%s%d end\n", bpftraceMarker, b.N)
	}
	return dst
}
