package explain

import (
	"errors"
	"strings"
	"testing"
)

// trace is ftrace's text for three reads on vda (254,0) as this kernel
// prints them (with the I/O priority field), one of them 5 ms, and one
// completion whose issue came before the window.
const trace = `# tracer: nop
            bash-9596    [000] ..... 100.000000: block_rq_issue: 254,0 RM 4096 () 21706864 + 8 be,0,4 [bash]
 spikehunt-agent-9601    [001] ..s.. 100.000200: block_rq_complete: 254,0 RM () 21706864 + 8 be,0,4 [0]
            bash-9596    [000] ..... 100.001000: block_rq_issue: 254,0 WS 65536 () 1477848 + 128 be,0,4 [bash]
          <idle>-0       [001] d.h1. 100.006000: block_rq_complete: 254,0 WS () 1477848 + 128 be,0,4 [0]
          <idle>-0       [001] d.h1. 100.007000: block_rq_complete: 253,0 R () 999 + 8 [0]
            bash-9596    [000] ..... 100.008000: sched_switch: prev_comm=bash prev_pid=9596 prev_prio=120 prev_state=D ==> next_comm=swapper/0 next_pid=0 next_prio=120
            bash-9596    [000] ..... 100.009000: block_rq_issue: 254,0 R 4096 () 55 + 8 [bash]
`

func TestBlockIOPairsIssuesWithCompletionsPerDevice(t *testing.T) {
	var b BlockIO
	if err := b.ReadBlockIO(strings.NewReader(trace)); err != nil {
		t.Fatal(err)
	}
	if len(b.Devices) != 1 || b.UnmatchedCompletions != 1 || b.InFlightAtEnd != 1 {
		t.Fatalf("%+v", b)
	}
	d := b.Devices[0]
	if d.Dev != "254,0" || d.IOs != 2 || d.TotalNS != 5_200_000 || d.MaxNS != 5_000_000 {
		t.Errorf("device %+v", d)
	}
	if q := d.Quantile(0.99); q != 8192 {
		t.Errorf("p99 bound %d µs, want 8192 (the 5 ms request's bucket [4096, 8192))", q)
	}
	if len(b.Slow) != 1 || b.Slow[0].RWBS != "WS" || b.Slow[0].End-b.Slow[0].Issue != 5_000_000 {
		t.Errorf("slow %+v", b.Slow)
	}
	// A wait of [100.002, 100.010) overlaps the 5 ms write for 4 ms.
	if got := b.DeviceTimeDuring(100_002_000_000, 100_010_000_000); got != 4_000_000 {
		t.Errorf("device time in the wait %d ns, want 4 ms", got)
	}
}

func TestBlockIORefusesBrokenBlockLines(t *testing.T) {
	for _, in := range []string{
		"x-1 [000] ..... nan: block_rq_issue: 254,0 R 4096 () 55 + 8 [x]\n",
		"x-1 [000] ..... 1.0: block_rq_issue: 254,0 R\n",
		"x-1 [000] ..... 1.0: block_rq_complete: 254,0 R () x + 8 [0]\n",
	} {
		var b BlockIO
		if err := b.ReadBlockIO(strings.NewReader(in)); !errors.Is(err, ErrFtraceSyntax) {
			t.Errorf("%q: %v", in, err)
		}
	}
}

func FuzzReadBlockIO(f *testing.F) {
	f.Add(trace)
	f.Fuzz(func(t *testing.T, s string) {
		var b BlockIO
		if err := b.ReadBlockIO(strings.NewReader(s)); err != nil && !errors.Is(err, ErrFtraceSyntax) {
			t.Fatal(err)
		}
		_ = b.DeviceTimeDuring(0, 1<<62)
		for _, d := range b.Devices {
			_ = d.Quantile(0.5)
		}
	})
}
