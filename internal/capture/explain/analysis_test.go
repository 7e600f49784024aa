package explain

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

// As a real capture of the demo had it: CPU 0 has thousands of samples,
// nearly all idle, and more busy samples than CPU 1, whose ring kept
// fewer samples, every one of them busy. The table shows CPU 0 at 3% and
// CPU 1 at 100%: the busiest is CPU 1.
func TestTheBusiestCPUIsTheOneTheTableShowsBusiest(t *testing.T) {
	cpus := []CPUUse{{CPU: 0, Samples: 3000, Idle: 2910, Softirq: 3}, {CPU: 1, Samples: 50, Softirq: 2}}
	f := findings(Analysis{CPUs: cpus})
	if f.HottestCPU != 1 || f.HottestCPUBusy != 1 {
		t.Errorf("hottest CPU %d at %.2f, want CPU 1 at 1.00", f.HottestCPU, f.HottestCPUBusy)
	}
	want := "the busiest was CPU 1 (100% of its 50 samples not idle); softirq work was 0.2% of all samples"
	if got := CPUSentence(cpus); got != want {
		t.Errorf("CPUSentence = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		name string
		cpus []CPUUse
		want int32
		ok   bool
	}{
		{"a tie in share goes to the CPU with more busy samples", []CPUUse{{CPU: 0, Samples: 10, Idle: 5}, {CPU: 1, Samples: 100, Idle: 50}}, 1, true},
		{"no busy sample names no CPU", []CPUUse{{CPU: 0, Samples: 10, Idle: 10}}, 0, false},
		{"no samples names no CPU", nil, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := Busiest(tc.cpus)
			if ok != tc.ok || (ok && c.CPU != tc.want) {
				t.Errorf("Busiest = CPU %d, %v; want CPU %d, %v", c.CPU, ok, tc.want, tc.ok)
			}
		})
	}
	if s := CPUSentence([]CPUUse{{CPU: 0, Samples: 10, Idle: 10}}); s != "" {
		t.Errorf("an idle node's sentence is %q, want none", s)
	}
}

func TestIdleStacksAreTheIdleTasksWithoutSoftirqWork(t *testing.T) {
	for stack, idle := range map[string]bool{
		"swapper;secondary_startup_64;do_idle;default_idle":         true,
		"swapper/3;start_secondary;do_idle;cpuidle_enter":           true,
		"swapper/0;do_idle;irq_exit_rcu;__do_softirq;net_rx_action": false,
		"swapper/1;do_idle;handle_softirqs;run_timer_softirq":       false,
		"swapperd;main":             false,
		"go;runtime.main;main.main": false,
		"web;main;swapper":          false,
	} {
		if got := IdleStack(stack); got != idle {
			t.Errorf("IdleStack(%q) = %v, want %v", stack, got, idle)
		}
	}
}

// A stall that holds a dozen requests on one thread words the same
// verdict a dozen times but for its times: they are one group.
func TestVerdictsThatDifferOnlyInTheirTimesAndThreadAreOneGroup(t *testing.T) {
	start := time.Unix(1_800_000_000, 0).UTC()
	verdict := func(thread string, ms int) RequestVerdict {
		q := record.RequestRecord{Start: start, End: start.Add(time.Duration(ms) * time.Millisecond), LatencyMS: float64(ms), Service: "checkout", Endpoint: "/v1/cart"}
		if ms == 1001 {
			q.Endpoint = "/v1/orders/save"
		}
		return RequestVerdict{Request: q, Thread: thread, Verdict: fmt.Sprintf("blocked %d ms in do_nanosleep (stack do_nanosleep ← hrtimer_nanosleep); woken by its timer; %s of the request on %s: on CPU 1 ms, runnable 3 ms, blocked %d ms",
			ms-4, SpokenDuration(time.Duration(ms)*time.Millisecond), thread, ms-4)}
	}
	var reqs []RequestVerdict
	for i := 0; i < 13; i++ {
		thread := "spikehunt[18335]"
		if i == 12 {
			thread = "spikehunt[18336]"
		}
		reqs = append(reqs, verdict(thread, 1001-39*i))
	}
	other := reqs[0]
	other.Verdict = "runnable 900 ms behind hog[7] on CPU 1; 1.00 s of the request on spikehunt[18335]: on CPU 1 ms, runnable 900 ms, blocked 100 ms"
	reqs = append(reqs[:5], append([]RequestVerdict{other}, reqs[5:]...)...)

	groups := GroupVerdicts(reqs)
	var sizes []int
	for _, g := range groups {
		sizes = append(sizes, len(g.Requests))
	}
	if d := cmp.Diff([]int{13, 1}, sizes); d != "" {
		t.Fatalf("group sizes (-want +got):\n%s", d)
	}
	g := groups[0]
	if g.Requests[0].Request.LatencyMS != 1001 {
		t.Errorf("the group's first request is %.0f ms, want the slowest, 1001 ms", g.Requests[0].Request.LatencyMS)
	}
	want := "13 requests with this verdict, 533–1001 ms (checkout /v1/cart ×12, checkout /v1/orders/save ×1), on 2 threads (spikehunt[18335], spikehunt[18336])"
	if got := g.Covers(); got != want {
		t.Errorf("Covers =\n%q, want\n%q", got, want)
	}
	if !strings.HasPrefix(groups[1].Requests[0].Verdict, "runnable") {
		t.Errorf("the second group is %q, want the runnable verdict", groups[1].Requests[0].Verdict)
	}
}
