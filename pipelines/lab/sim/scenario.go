package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/spikehunt/spikehunt/internal/vocab"
)

// Host is one simulated machine.
type Host struct {
	Index   int
	Name    string
	HWClass string
	Stalls  []Stall // in time order
}

// Stall is one spike's cause on one host: from Start for Length, requests
// are slowed and, unless Cause is none, kernel counters move.
type Stall struct {
	Start  time.Time
	Length time.Duration
	Cause  string
	// Endpoint, when not "", is the only endpoint whose requests wait: the
	// stall is in a dependency of that endpoint, not in the host.
	Endpoint string
}

// End is when the stall is over.
func (s Stall) End() time.Time { return s.Start.Add(s.Length) }

// Truth is what the simulator did, for scoring the detectors.
type Truth struct {
	Scenario string
	// Class is the pattern a detector should report ("" for none), with
	// its modifiers.
	Class     string
	Modifiers []string
	// Period is the typical recurrence period of the pattern (0 without
	// one): the unit of detection delay.
	Period time.Duration
	// SecondOccurrence is when the pattern had occurred twice: the median,
	// over affected hosts, of each host's second stall (for a synchronized
	// pattern, the second fleet-wide stall; for an isolated host, its
	// second stall). Zero without a pattern.
	SecondOccurrence time.Time
	// Cause and TopSuspects: the kernel counter series a detector should
	// rank first for spikes of this cause (any of them counts).
	Cause       string
	TopSuspects []SuspectKey
	// StalledEndpoints are the endpoints the pattern's stalls hold up, when
	// not every endpoint (endpoint-stall); UnaffectedEndpoints the service's
	// others.
	StalledEndpoints, UnaffectedEndpoints []string
	// Windows: every stall on every host, the spike windows a detector
	// should find, in host then time order.
	Windows       []Window
	AffectedHosts int
	HostsTotal    int
}

// Window is one ground-truth spike window.
type Window struct {
	Host       string
	Start, End time.Time
	Cause      string
}

// SuspectKey names a counter series family: CPUs empty means any CPU (or
// not per CPU). DevicePrefix, when set, matches every device that starts
// with it: a Deployment's pods, one per host, each named by its own.
type SuspectKey struct {
	Metric, Mode, Device string
	DevicePrefix         string
	CPUs                 []int
}

// stormCPUs are the CPUs a NIC's four RSS queues interrupt (the DPC flood (docs/field-stories.md): four
// of 24 logical CPUs pinned).
var stormCPUs = []int{0, 2, 4, 6}

// downIfaceCPU takes the down interface's receive interrupts.
const downIfaceCPU = 1

// Plan lays out the fleet: hosts, hardware classes and every stall, and the
// ground truth. It is deterministic in cfg (cfg must be filled by Defaults).
func Plan(cfg Config) ([]Host, Truth) {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed_f1ee7))
	hosts := make([]Host, cfg.Hosts)
	for i := range hosts {
		hosts[i] = Host{Index: i, Name: fmt.Sprintf("node-%04d", i), HWClass: cfg.HWClasses[i%len(cfg.HWClasses)]}
	}
	affected := pickAffected(cfg, rng)
	end := cfg.Start.Add(cfg.Duration)
	period := func() time.Duration {
		return cfg.PeriodMin + time.Duration(rng.Float64()*float64(cfg.PeriodMax-cfg.PeriodMin))
	}
	truth := Truth{Scenario: cfg.Scenario, Cause: cfg.Cause, HostsTotal: cfg.Hosts, AffectedHosts: len(affected)}

	switch cfg.Scenario {
	case ThousandSpikes, NICSoftirqStorm, DownInterface, IOStall, EndpointStall, CPUThrottle, NoisyNeighbor, Reclaim, TCPListen:
		// Each affected host recurs on its own period and phase.
		for _, i := range affected {
			p := period()
			if cfg.SkewClass != "" && hosts[i].HWClass == cfg.SkewClass {
				p = time.Duration(float64(p) / cfg.Skew)
			}
			t := cfg.Start.Add(time.Duration(rng.Float64() * float64(p)))
			for t.Before(end) {
				hosts[i].Stalls = append(hosts[i].Stalls, Stall{Start: t, Length: cfg.SpikeLength, Cause: cfg.Cause, Endpoint: stalledEndpoint(cfg.Scenario)})
				t = t.Add(time.Duration(float64(p) * (1 + cfg.Jitter*(2*rng.Float64()-1))))
			}
		}
		truth.Period = (cfg.PeriodMin + cfg.PeriodMax) / 2
		truth.Class = vocab.ClassFleetRecurrent
		if len(affected) <= isolatedMax(cfg.Hosts) {
			truth.Class = vocab.ClassIsolatedHost
		}
		if cfg.Skew >= 1.5 && cfg.SkewClass != "" && len(cfg.HWClasses) > 1 && truth.Class == vocab.ClassFleetRecurrent {
			truth.Modifiers = []string{vocab.ModifierHWClassSkewed}
		}
	case BadHost:
		// One host, a Poisson process with mean interval PeriodMin.
		i := affected[0]
		t := cfg.Start
		for {
			t = t.Add(time.Duration(rng.ExpFloat64() * float64(cfg.PeriodMin)))
			if !t.Before(end) {
				break
			}
			hosts[i].Stalls = append(hosts[i].Stalls, Stall{Start: t, Length: cfg.SpikeLength, Cause: cfg.Cause})
		}
		truth.Class, truth.Period = vocab.ClassIsolatedHost, cfg.PeriodMin
	case Synchronized:
		// The same stall on every affected host, PeriodMin apart, from a
		// fleet-wide phase.
		p := cfg.PeriodMin
		for t := cfg.Start.Add(time.Duration(rng.Float64() * float64(p))); t.Before(end); t = t.Add(p) {
			for _, i := range affected {
				hosts[i].Stalls = append(hosts[i].Stalls, Stall{Start: t, Length: cfg.SpikeLength, Cause: cfg.Cause})
			}
		}
		truth.Class, truth.Period = vocab.ClassFleetSynchronized, p
	}
	// Independent noise spikes on every host, in any scenario.
	if cfg.Noise > 0 {
		mean := time.Duration(float64(time.Hour) / cfg.Noise)
		for i := range hosts {
			t := cfg.Start
			for {
				t = t.Add(time.Duration(rng.ExpFloat64() * float64(mean)))
				if !t.Before(end) {
					break
				}
				hosts[i].Stalls = append(hosts[i].Stalls, Stall{Start: t, Length: time.Second, Cause: CauseNone})
			}
		}
	}
	for i := range hosts {
		h := &hosts[i]
		sort.Slice(h.Stalls, func(a, b int) bool { return h.Stalls[a].Start.Before(h.Stalls[b].Start) })
		h.Stalls = mergeOverlaps(h.Stalls)
		for _, s := range h.Stalls {
			truth.Windows = append(truth.Windows, Window{Host: h.Name, Start: s.Start, End: s.End(), Cause: s.Cause})
		}
	}
	truth.SecondOccurrence = secondOccurrence(hosts, affected)
	if truth.Class == "" {
		truth.Period, truth.SecondOccurrence = 0, time.Time{}
	}
	truth.TopSuspects = topSuspects(cfg.Cause, cfg.Service)
	if ep := stalledEndpoint(cfg.Scenario); ep != "" {
		truth.StalledEndpoints = []string{ep}
		for _, e := range endpointsOf(cfg.Scenario) {
			if e.name != ep {
				truth.UnaffectedEndpoints = append(truth.UnaffectedEndpoints, e.name)
			}
		}
	}
	return hosts, truth
}

// stalledEndpoint is the one endpoint a scenario's stalls hold up, "" when
// they hold up the host.
func stalledEndpoint(scenario string) string {
	if scenario == EndpointStall {
		return storefront[0].name
	}
	return ""
}

// isolatedMax is the most hosts a pattern may have and still be "one or
// few hosts" (docs/design.md §5).
func isolatedMax(hosts int) int { return max(3, hosts*2/100) }

// pickAffected chooses the affected hosts: Fraction of the fleet (at least
// one when the fraction is positive; exactly one for bad-host), at random
// but deterministically.
func pickAffected(cfg Config, rng *rand.Rand) []int {
	n := int(math.Round(cfg.Fraction * float64(cfg.Hosts)))
	if cfg.Fraction > 0 {
		n = max(n, 1)
	}
	if cfg.Scenario == BadHost {
		n = 1
	}
	switch cfg.Scenario {
	case Healthy, SlowCreep, Noisy:
		n = 0
	}
	perm := rng.Perm(cfg.Hosts)
	out := perm[:n]
	sort.Ints(out)
	return out
}

// mergeOverlaps joins stalls that overlap (a noise spike inside a
// scheduled one), keeping the first one's cause.
func mergeOverlaps(st []Stall) []Stall {
	out := st[:0]
	for _, s := range st {
		if n := len(out); n > 0 && !s.Start.After(out[n-1].End()) {
			if e := s.End(); e.After(out[n-1].End()) {
				out[n-1].Length = e.Sub(out[n-1].Start)
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

// secondOccurrence is the median over affected hosts of their second
// stall's start.
func secondOccurrence(hosts []Host, affected []int) time.Time {
	var seconds []time.Time
	for _, i := range affected {
		if len(hosts[i].Stalls) >= 2 {
			seconds = append(seconds, hosts[i].Stalls[1].Start)
		}
	}
	if len(seconds) == 0 {
		return time.Time{}
	}
	sort.Slice(seconds, func(a, b int) bool { return seconds[a].Before(seconds[b]) })
	return seconds[len(seconds)/2]
}

// topSuspects are the series that move first and most for a cause.
func topSuspects(cause, service string) []SuspectKey {
	switch cause {
	case CauseNICSoftirq:
		return []SuspectKey{
			{Metric: "system.cpu.time", Mode: "softirq", CPUs: stormCPUs},
			{Metric: "spikehunt.softirqs", Mode: "NET_RX", CPUs: stormCPUs},
		}
	case CauseDownIface:
		return []SuspectKey{
			{Metric: "system.network.packet.count", Mode: "receive", Device: downIface},
			{Metric: "system.network.packet.dropped", Mode: "receive", Device: downIface},
		}
	case CauseDisk:
		// The detector judges a disk by its IOs' latency, which it derives
		// from the operation time and operations (the series exists in its
		// suspects only); the busy time comes with it.
		return []SuspectKey{
			{Metric: "spikehunt.disk.operation_latency", Mode: "write", Device: disk},
			{Metric: "system.disk.io_time", Device: disk},
		}
	case CauseCPUThrottle:
		return []SuspectKey{
			{Metric: "spikehunt.cgroup.cpu.throttled_time", DevicePrefix: servicePodPrefix(service)},
		}
	case CauseNeighbour:
		return []SuspectKey{{Metric: "spikehunt.cgroup.cpu.usage", Device: neighbourUnit}}
	case CauseReclaim:
		return []SuspectKey{
			{Metric: "spikehunt.memory.reclaim.scanned"},
			{Metric: "spikehunt.memory.reclaim.stalls"},
		}
	case CauseTCPListen:
		return []SuspectKey{
			{Metric: "spikehunt.tcp.listen_overflows"},
			{Metric: "spikehunt.tcp.listen_drops"},
		}
	}
	return nil
}
