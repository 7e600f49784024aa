package bpftrace

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestBpftraceMarkerLine(t *testing.T) {
	for _, tc := range []struct {
		in        string
		n, mono   int64
		begin, ok bool
	}{
		{in: "=== spikehunt interval 12 begin 12032964969150\n", n: 12, mono: 12032964969150, begin: true, ok: true},
		{in: "=== spikehunt interval 12 end\n", n: 12, ok: true},
		{in: "=== spikehunt interval 0 end", n: 0, ok: true},
		{in: "=== spikehunt interval 12 begin\n"},
		{in: "=== spikehunt interval 12 end 5\n"},
		{in: "=== spikehunt interval -1 end\n"},
		{in: "=== spikehunt interval 1 begin -5\n"},
		{in: "=== spikehunt interval x end\n"},
		{in: "=== spikehunt interval 99999999999999999999 end\n"},
		{in: "  === spikehunt interval 1 end\n"},
		{in: "@softirq_us[0]: \n"},
		{in: ""},
	} {
		n, mono, begin, ok := bpftraceMarkerLine([]byte(tc.in))
		if n != tc.n || mono != tc.mono || begin != tc.begin || ok != tc.ok {
			t.Errorf("bpftraceMarkerLine(%q) = %d, %d, %v, %v; want %d, %d, %v, %v", tc.in, n, mono, begin, ok, tc.n, tc.mono, tc.begin, tc.ok)
		}
	}
}

func TestBpftraceStatusLines(t *testing.T) {
	for _, tc := range []struct {
		in   string
		lost uint64
		ok   bool
	}{
		{"Lost 12 events\n", 12, true},
		{"Lost 0 events", 0, true},
		{"Lost twelve events", 0, false},
		{"Lost 12 events today", 0, false},
		{"Lost -1 events", 0, false},
	} {
		if n, ok := bpftraceLostLine([]byte(tc.in)); n != tc.lost || ok != tc.ok {
			t.Errorf("bpftraceLostLine(%q) = %d, %v; want %d, %v", tc.in, n, ok, tc.lost, tc.ok)
		}
	}
	for _, tc := range []struct {
		in     string
		probes int
		ok     bool
	}{
		{"Attaching 6 probes...\n", 6, true},
		{"Attaching 1 probe...", 1, true},
		{"Attaching 0 probes...", 0, false},
		{"Attaching six probes...", 0, false},
		{"No probes to attach", 0, false},
	} {
		if n, ok := bpftraceAttachingLine([]byte(tc.in)); n != tc.probes || ok != tc.ok {
			t.Errorf("bpftraceAttachingLine(%q) = %d, %v; want %d, %v", tc.in, n, ok, tc.probes, tc.ok)
		}
	}
}

// fakeNow is a clock the test moves by hand.
type fakeNow struct{ t time.Time }

func (c *fakeNow) now() time.Time { return c.t }

var flightEpoch = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// feedBlock sends interval n, with one histogram line, at second n.
func feedBlock(f *bpftraceFlight, c *fakeNow, n int64, body string) {
	c.t = flightEpoch.Add(time.Duration(n) * time.Second)
	f.Line(fmt.Appendf(nil, "=== spikehunt interval %d begin %d\n", n, n*1e9), false)
	for line := range strings.Lines(body) {
		f.Line([]byte(line), false)
	}
	f.Line(fmt.Appendf(nil, "=== spikehunt interval %d end\n", n), false)
}

func blockNumbers(bs []bpftraceBlock) []int64 {
	var out []int64
	for _, b := range bs {
		out = append(out, b.N)
	}
	return out
}

func TestBpftraceFlightKeepsThePreWindowAndWhatFollows(t *testing.T) {
	c := &fakeNow{t: flightEpoch}
	f := newBpftraceFlight(3*time.Second, DefaultBpftraceMaxBytes, c.now)
	f.Line([]byte("Attaching 6 probes...\n"), false)
	select {
	case <-f.attaching:
	default:
		t.Fatal("Attaching did not signal")
	}
	for n := int64(1); n <= 10; n++ {
		feedBlock(f, c, n, "@softirq_us[0]: \n[1]   5 |@@@@@|\n\n")
	}
	c.t = flightEpoch.Add(10*time.Second + 200*time.Millisecond)
	pre := f.Fire()
	// Fire at 10.2 s with a 3 s pre-window: blocks 8–10 cover (7.2, 10],
	// and block 7, received at 7 s, covers the window's start.
	if diff := cmp.Diff([]int64{7, 8, 9, 10}, blockNumbers(pre)); diff != "" {
		t.Errorf("pre-window blocks (-want +got)\n%s", diff)
	}
	if got := string(pre[3].Text); got != "@softirq_us[0]: \n[1]   5 |@@@@@|\n\n" {
		t.Errorf("block text %q", got)
	}
	if !pre[3].Received.Equal(flightEpoch.Add(10*time.Second)) || pre[3].Mono != 10e9 {
		t.Errorf("block 10 received %v, mono %d", pre[3].Received, pre[3].Mono)
	}
	feedBlock(f, c, 11, "x\n")
	f.Line([]byte("Lost 3 events\n"), false)
	feedBlock(f, c, 12, "y\n")
	// bpftrace stopped inside interval 13.
	f.Line([]byte("=== spikehunt interval 13 begin 13000000000\n"), false)
	f.Line([]byte("z\n"), false)
	post, tally := f.Finish()
	if diff := cmp.Diff([]int64{11, 12, 13}, blockNumbers(post)); diff != "" {
		t.Errorf("post-window blocks (-want +got)\n%s", diff)
	}
	if !post[2].Truncated || post[0].Truncated {
		t.Errorf("truncated flags %v %v %v, want only the last", post[0].Truncated, post[1].Truncated, post[2].Truncated)
	}
	if diff := cmp.Diff(bpftraceTally{Lost: 3, Truncated: 1}, tally); diff != "" {
		t.Errorf("tally (-want +got)\n%s", diff)
	}
}

// On SIGINT a starved bpftrace may print its END block without the
// interval whose probe had just run: the flight names the missing number.
func TestBpftraceFlightNamesAnIntervalPrintedNeverBeforeEND(t *testing.T) {
	c := &fakeNow{t: flightEpoch}
	f := newBpftraceFlight(3*time.Second, DefaultBpftraceMaxBytes, c.now)
	feedBlock(f, c, 1, "a\n")
	f.Fire()
	feedBlock(f, c, 2, "b\n")
	feedBlock(f, c, 4, "d\n") // END's block; 3 never came
	post, tally := f.Finish()
	if diff := cmp.Diff([]int64{2, 4}, blockNumbers(post)); diff != "" {
		t.Errorf("post-window blocks (-want +got)\n%s", diff)
	}
	if diff := cmp.Diff([]int64{3}, tally.Unprinted); diff != "" {
		t.Errorf("unprinted (-want +got)\n%s", diff)
	}
}

func TestBpftraceFlightCountsWhatItCannotKeep(t *testing.T) {
	for _, tc := range []struct {
		name  string
		feed  func(f *bpftraceFlight, c *fakeNow)
		pre   []int64
		post  []int64
		tally bpftraceTally
	}{
		{
			name: "a ring over its bytes drops its oldest blocks, inside the window too",
			feed: func(f *bpftraceFlight, c *fakeNow) {
				for n := int64(1); n <= 8; n++ {
					feedBlock(f, c, n, strings.Repeat("h", 10<<10)+"\n")
				}
			},
			pre:   []int64{3, 4, 5, 6, 7, 8},
			tally: bpftraceTally{Dropped: 2},
		},
		{
			name: "the post-window keeps its oldest blocks within its bytes",
			feed: func(f *bpftraceFlight, c *fakeNow) {
				f.Fire()
				for n := int64(1); n <= 8; n++ {
					feedBlock(f, c, n, strings.Repeat("h", 10<<10)+"\n")
				}
			},
			post:  []int64{1, 2, 3, 4, 5, 6},
			tally: bpftraceTally{Dropped: 2},
		},
		{
			name: "a block over a quarter of the bytes is cut",
			feed: func(f *bpftraceFlight, c *fakeNow) {
				feedBlock(f, c, 1, strings.Repeat("h\n", 10<<10))
			},
			pre:   []int64{1},
			tally: bpftraceTally{Truncated: 1},
		},
		{
			name: "a begin without an end is kept as truncated",
			feed: func(f *bpftraceFlight, c *fakeNow) {
				f.Line([]byte("=== spikehunt interval 1 begin 1\n"), false)
				feedBlock(f, c, 2, "b\n")
			},
			pre:   []int64{1, 2},
			tally: bpftraceTally{Truncated: 1},
		},
		{
			name: "lines outside blocks and an end of another interval are stray",
			feed: func(f *bpftraceFlight, c *fakeNow) {
				f.Line([]byte("WARNING: something\n"), false)
				f.Line([]byte("\n"), false)
				f.Line([]byte("=== spikehunt interval 4 end\n"), false)
				f.Line([]byte("=== spikehunt interval 5 begin 1\n"), false)
				f.Line([]byte("=== spikehunt interval 6 end\n"), false)
				f.Line([]byte("=== spikehunt interval 5 end\n"), false)
			},
			pre:   []int64{5},
			tally: bpftraceTally{Stray: 3},
		},
		{
			name: "a line cut by the reader marks its block",
			feed: func(f *bpftraceFlight, c *fakeNow) {
				f.Line([]byte("=== spikehunt interval 1 begin 1\n"), false)
				f.Line([]byte("@long[aaaa"), true)
				f.Line([]byte("=== spikehunt interval 1 end\n"), false)
			},
			pre:   []int64{1},
			tally: bpftraceTally{Truncated: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &fakeNow{t: flightEpoch}
			// 64 KiB: a window holds six blocks of 10 KiB.
			f := newBpftraceFlight(time.Hour, MinBpftraceMaxBytes, c.now)
			tc.feed(f, c)
			var pre []bpftraceBlock
			if !f.fired {
				pre = f.Fire()
			}
			post, tally := f.Finish()
			if diff := cmp.Diff(tc.pre, blockNumbers(pre)); diff != "" {
				t.Errorf("pre (-want +got)\n%s", diff)
			}
			if diff := cmp.Diff(tc.post, blockNumbers(post)); diff != "" {
				t.Errorf("post (-want +got)\n%s", diff)
			}
			if diff := cmp.Diff(tc.tally, tally); diff != "" {
				t.Errorf("tally (-want +got)\n%s", diff)
			}
			for _, b := range append(pre, post...) {
				if len(b.Text) > MinBpftraceMaxBytes/4 {
					t.Errorf("block %d holds %d bytes, over a quarter of %d", b.N, len(b.Text), MinBpftraceMaxBytes)
				}
			}
		})
	}
}

func TestAppendBpftraceBlocks(t *testing.T) {
	got := appendBpftraceBlocks([]byte("# head\n"), []bpftraceBlock{
		{N: 7, Mono: 7000000001, Received: flightEpoch.Add(1500 * time.Millisecond), Text: []byte("@softirq_us[1]: \n[2, 4)   3 |@@@|\n")},
		{N: 8, Mono: 8000000001, Received: flightEpoch.Add(2500 * time.Millisecond), Truncated: true},
	})
	want := `# head
=== spikehunt interval 7 begin 7000000001
# received 2025-03-01T12:00:01.5Z
@softirq_us[1]: 
[2, 4)   3 |@@@|
=== spikehunt interval 7 end
=== spikehunt interval 8 begin 8000000001
# received 2025-03-01T12:00:02.5Z
# truncated: this block lost lines (over its memory share, or bpftrace stopped inside it)
=== spikehunt interval 8 end
`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

func TestBpftraceReadLinesCutsLongLines(t *testing.T) {
	in := "short\n" + strings.Repeat("x", 100<<10) + "\nafter\nno newline"
	type line struct {
		Len int
		Cut bool
	}
	var got []line
	bpftraceReadLines(strings.NewReader(in), func(b []byte, cut bool) {
		got = append(got, line{len(b), cut})
	})
	want := []line{{6, false}, {64 << 10, true}, {6, false}, {10, false}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

func FuzzBpftraceFlight(f *testing.F) {
	f.Add([]byte("Attaching 6 probes...\n=== spikehunt interval 1 begin 5\n@softirq_us[0]: \n[1] 4 |@@@@|\n=== spikehunt interval 1 end\nLost 2 events\n"))
	f.Add([]byte("=== spikehunt interval 1 begin 5\n=== spikehunt interval 2 begin 6\n=== spikehunt interval 2 end\n=== spikehunt interval 1 end\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c := &fakeNow{t: flightEpoch}
		fl := newBpftraceFlight(2*time.Second, MinBpftraceMaxBytes, func() time.Time {
			c.t = c.t.Add(300 * time.Millisecond)
			return c.t
		})
		half := len(b) / 2
		var pre []bpftraceBlock
		bpftraceReadLines(bytes.NewReader(b[:half]), fl.Line)
		pre = fl.Fire()
		bpftraceReadLines(bytes.NewReader(b[half:]), fl.Line)
		post, _ := fl.Finish()
		total := 0
		for _, bl := range pre {
			total += bl.size()
		}
		if len(pre) > 1 && total > MinBpftraceMaxBytes {
			t.Fatalf("pre-window holds %d bytes in %d blocks, over %d", total, len(pre), MinBpftraceMaxBytes)
		}
		total = 0
		for _, bl := range post {
			total += bl.size()
			if len(bl.Text) > MinBpftraceMaxBytes/4 {
				t.Fatalf("block of %d bytes", len(bl.Text))
			}
		}
		if total > MinBpftraceMaxBytes {
			t.Fatalf("post-window holds %d bytes, over %d", total, MinBpftraceMaxBytes)
		}
	})
}
