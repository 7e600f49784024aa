package capture

import (
	"fmt"
	"slices"
	"sort"
)

// Profile is a named recipe for a backend: what to record and how big a
// ring to keep. Administrators add their own next to the built-in ones;
// a capture request only names one.
type Profile struct {
	Name    string `json:"name"`
	Backend string `json:"backend"`
	// Events are the backend's event names: perf event specs
	// ("cpu-clock", "sched:sched_switch"), tracefs events
	// ("sched/sched_switch"), or WPR providers/keywords.
	Events []string `json:"events"`
	// FrequencyHz is the sampling rate of perf's timer event.
	FrequencyHz int `json:"frequency_hz,omitempty"`
	// CallGraph is perf's call-graph mode: "", "fp", "dwarf" or "lbr".
	// It applies to the sampled (timer) events; tracepoints get stacks
	// only with TracepointStacks.
	CallGraph string `json:"call_graph,omitempty"`
	// TracepointStacks unwinds a stack on every tracepoint hit too: with
	// sched_switch that is where each thread blocked, at the price of an
	// unwind per context switch (several % of a core on a busy server).
	TracepointStacks bool `json:"tracepoint_stacks,omitempty"`
	// BlockingStacks (perf) records the call chain of each switch where a
	// thread blocks (it leaves the CPU sleeping, S, or in uninterruptible
	// wait, D) as a second sched_switch event filtered in the kernel:
	// where every slow request's thread waited, at the price of an unwind
	// per blocking switch rather than per switch. For ftrace it is a
	// stacktrace trigger on sched_switch for uninterruptible waits (D)
	// only, the IO profile's waits: the kernel's call chain, in the ring.
	BlockingStacks bool `json:"blocking_stacks,omitempty"`
	// RingKB is the ring size per CPU (perf -m, ftrace buffer_size_kb);
	// for WPR, whose ETW buffers are one pool for all CPUs, the total.
	RingKB int `json:"ring_kb"`
}

// BuiltinProfiles are the profiles every agent has.
var BuiltinProfiles = []Profile{
	{
		// On-CPU samples with stacks, every context switch and wakeup,
		// so that a slow request's thread has a timeline (on CPU,
		// runnable behind whom, blocked until whose wakeup), and the call
		// chain of each blocking switch: where it waited. Preemptions
		// carry no stack, which keeps it light.
		Name: "default", Backend: Perf,
		Events:      []string{"cpu-clock", "sched:sched_switch", "sched:sched_wakeup"},
		FrequencyHz: 99, CallGraph: "fp", BlockingStacks: true, RingKB: 4096,
	},
	{
		// Off-CPU stacks: where each thread blocked, for an hour when
		// the default profile has shown that the wait is the problem.
		Name: "offcpu", Backend: Perf,
		Events:      []string{"cpu-clock", "sched:sched_switch"},
		FrequencyHz: 99, CallGraph: "fp", TracepointStacks: true, RingKB: 8192,
	},
	{
		// Only on-CPU samples, for hosts where switches are too many.
		Name: "oncpu", Backend: Perf,
		Events:      []string{"cpu-clock"},
		FrequencyHz: 99, CallGraph: "fp", RingKB: 2048,
	},
	{
		// The scheduler, interrupts and block IO: who ran, what
		// interrupted it, which IO was in flight.
		Name: "default", Backend: Ftrace,
		Events: []string{
			"sched/sched_switch", "sched/sched_wakeup",
			"irq/irq_handler_entry", "irq/irq_handler_exit",
			"irq/softirq_entry", "irq/softirq_exit",
			"block/block_rq_issue", "block/block_rq_complete",
		},
		BlockingStacks: true, RingKB: 8192,
	},
	{
		Name: "default", Backend: Bpftrace, RingKB: 0,
	},
	{
		// CPU samples, context switches, DPCs/ISRs and disk IO: the
		// the DPC flood (docs/field-stories.md) view on Windows.
		Name: "default", Backend: WPR,
		Events: []string{"CpuConfig", "Loader", "ProcessThread", "SampledProfile", "CSwitch", "ReadyThread", "DPC", "Interrupt", "DiskIO", "HardFaults"},
		RingKB: 256 * 1024,
	},
}

// Profiles is the set a recorder may be asked for, by backend and name.
type Profiles struct{ m map[string]Profile }

// NewProfiles returns the built-in profiles plus extra, which may replace
// a built-in one of the same backend and name.
func NewProfiles(extra ...Profile) (*Profiles, error) {
	p := &Profiles{m: map[string]Profile{}}
	for _, b := range BuiltinProfiles {
		p.m[b.Backend+"/"+b.Name] = b
	}
	for _, e := range extra {
		if err := e.Validate(); err != nil {
			return nil, err
		}
		p.m[e.Backend+"/"+e.Name] = e
	}
	return p, nil
}

// Get finds a profile; name "" is "default".
func (p *Profiles) Get(backend, name string) (Profile, error) {
	if name == "" {
		name = "default"
	}
	pr, ok := p.m[backend+"/"+name]
	if !ok {
		return Profile{}, fmt.Errorf("%w: no %s profile %q (have %v)", ErrInvalid, backend, name, p.Names(backend))
	}
	return pr, nil
}

// Names lists a backend's profiles.
func (p *Profiles) Names(backend string) []string {
	var out []string
	for _, pr := range p.m {
		if pr.Backend == backend {
			out = append(out, pr.Name)
		}
	}
	sort.Strings(out)
	return out
}

// Validate checks an administrator's profile.
func (p Profile) Validate() error {
	if err := ValidName("profile", p.Name); err != nil {
		return err
	}
	if !slices.Contains([]string{Perf, Ftrace, Bpftrace, WPR}, p.Backend) {
		return fmt.Errorf("%w: profile %q: unknown backend %q", ErrInvalid, p.Name, p.Backend)
	}
	if p.RingKB != 0 && (p.RingKB < MinRingKB || p.RingKB > MaxRingKB) {
		return fmt.Errorf("%w: profile %q: ring %d KiB per CPU is outside [%d, %d]", ErrInvalid, p.Name, p.RingKB, MinRingKB, MaxRingKB)
	}
	if p.FrequencyHz < 0 || p.FrequencyHz > 100000 {
		return fmt.Errorf("%w: profile %q: frequency %d Hz", ErrInvalid, p.Name, p.FrequencyHz)
	}
	if !slices.Contains([]string{"", "fp", "dwarf", "lbr"}, p.CallGraph) {
		return fmt.Errorf("%w: profile %q: call graph %q (fp, dwarf or lbr)", ErrInvalid, p.Name, p.CallGraph)
	}
	for _, e := range p.Events {
		if e == "" || len(e) > 256 {
			return fmt.Errorf("%w: profile %q: event name %q", ErrInvalid, p.Name, e)
		}
		for _, c := range e {
			// Events reach a command line and tracefs paths: no spaces,
			// no shell or path tricks.
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == ':' || c == '/' || c == '-' || c == '.' || c == '=' || c == ',') {
				return fmt.Errorf("%w: profile %q: event %q has %q", ErrInvalid, p.Name, e, c)
			}
		}
	}
	return nil
}
