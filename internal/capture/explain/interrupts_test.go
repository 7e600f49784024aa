package explain

import (
	"errors"
	"strings"
	"testing"
)

// blocks are two intervals of irq_duration output as the bpftrace recorder
// files them.
const blocks = `# spikehunt bpftrace capture c: script irq_duration, pre-window 5s, 2 interval blocks
=== spikehunt interval 7 begin 1000000000000
# received 2026-11-26T09:00:00Z
@softirq_us[0]:
[0]                  10 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[2, 4)                5 |@@@@@@@@@@@@@@@@@@@@@@@@@@                          |
[128, 256)            1 |@@@@@                                               |

@hardirq_us[1]:
[1]                   3 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|

@softirq_over_100us[0, 3]: 1
@hardirq_over_100us[1, 24]: 2
@softirq_ns[0, 3]: 300000000
@softirq_ns[0, 1]: 1000000
@softirq_runs[0, 3]: 12
@softirq_runs[0, 1]: 4
=== spikehunt interval 7 end
=== spikehunt interval 8 begin 1001000000000
# received 2026-11-26T09:00:01Z
# truncated: this block lost lines (over its memory share, or bpftrace stopped inside it)
@softirq_us[0]:
[0]                   2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[1K, 2K)              1 |@@@@@@@@@@@@@@@@@@@@@@@@@@                          |
@softirq_ns[0, 3]: 100000000
@softirq_runs[0, 3]: 3
=== spikehunt interval 8 end
`

func TestIrqBlocksSumOverTheWindow(t *testing.T) {
	var in Interrupts
	if err := in.ReadIrqBlocks(strings.NewReader(blocks)); err != nil {
		t.Fatal(err)
	}
	if in.Intervals != 2 || in.Seconds != 2 || in.Truncated != 1 || len(in.CPUs) != 2 {
		t.Fatalf("%+v", in)
	}
	c0 := in.CPUs[0]
	if c0.SoftirqRuns != 19 || c0.SoftirqNS != 401000000 || c0.SoftirqOver100 != 1 || len(c0.SoftirqHist) != 4 || c0.SoftirqHist[3] != (Bucket{1024, 2048, 1}) {
		t.Errorf("CPU 0: %+v", c0)
	}
	if in.CPUs[1].HardirqRuns != 3 || in.CPUs[1].HardirqOver100 != 2 || in.HardirqsOver100[0] != (IRQCount{CPU: 1, IRQ: 24, Count: 2}) {
		t.Errorf("CPU 1: %+v, IRQs %+v", in.CPUs[1], in.HardirqsOver100)
	}
	if v := in.Vectors[0]; v.Name != "NET_RX" || v.NS != 400000000 || v.Runs != 15 || v.Over100 != 1 {
		t.Errorf("vectors %+v", in.Vectors)
	}
	want := "NET_RX softirq took 20% of CPU 0 over the 2 s window (15 runs); 1 of 19 softirq runs on all CPUs (5.26%) lasted over 100 µs"
	if got := in.Verdict(); got != want {
		t.Errorf("verdict\n%s\nwant\n%s", got, want)
	}
	if f := in.Findings(4); f.HottestCPU != 0 || f.HottestShare != 0.2005 || f.SoftirqShare != 0.401/8 {
		t.Errorf("findings %+v", f)
	}
}

func TestIrqBlocksRefuseWhatTheScriptDoesNotPrint(t *testing.T) {
	for _, in := range []string{
		"[0] 5 |@|\n",
		"hello\n",
		"@softirq_ns[0, 3]: -5\n",
		"@softirq_ns[99999, 3]: 5\n",
		"=== spikehunt interval 1 begin x\n",
		"@softirq_us[0]:\n[x, 4) 3 |@|\n",
	} {
		var irq Interrupts
		if err := irq.ReadIrqBlocks(strings.NewReader(in)); !errors.Is(err, ErrIrqSyntax) {
			t.Errorf("%q: %v, want ErrIrqSyntax", in, err)
		}
	}
}

func FuzzReadIrqBlocks(f *testing.F) {
	f.Add(blocks)
	f.Fuzz(func(t *testing.T, s string) {
		var in Interrupts
		if err := in.ReadIrqBlocks(strings.NewReader(s)); err != nil && !errors.Is(err, ErrIrqSyntax) {
			t.Fatalf("error %v does not wrap ErrIrqSyntax", err)
		}
		_ = in.Verdict()
		_ = in.Findings(2)
	})
}
