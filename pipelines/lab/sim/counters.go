package sim

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// Kernel counters are emitted as the agent's samplers emit them
// (agents/collect): deltas over a measured interval, with the same metric
// names and attributes. A simulated host has CPUs logical CPUs, an up NIC
// (eth0), a down one (eth1: the down interface (docs/field-stories.md)) and one disk. Levels follow the load;
// every series has a few percent of noise; a stall's cause adds its
// signature for the part of the interval it overlaps.

const (
	upIface   = "eth0"
	downIface = "eth1"
	disk      = "sda"
)

// Attributes shared by every host, built once.
var (
	cpuModes       = []string{"user", "system", "idle", "iowait", "irq", "softirq"}
	softirqVectors = []string{"NET_RX", "TIMER", "BLOCK"}
	recv, xmit     = telemetry.Str("network.io.direction", "receive"), telemetry.Str("network.io.direction", "transmit")
	stateUp        = telemetry.Str("spikehunt.network.operstate", "up")
	stateDown      = telemetry.Str("spikehunt.network.operstate", "down")
	diskAttr       = telemetry.Str("system.device", disk)
	diskRead       = telemetry.Str("disk.io.direction", "read")
	diskWrite      = telemetry.Str("disk.io.direction", "write")
	psiSome        = telemetry.Str("spikehunt.pressure.kind", "some")
)

// counterGen emits one host's counters interval by interval.
type counterGen struct {
	cfg  Config
	host *Host
	rng  *rand.Rand
	next int    // first stall not over before the current interval
	pod  string // the service's pod on this host
	// Reused per interval.
	softirq, user, idle, iowait []float64
}

func newCounterGen(cfg Config, h *Host, rng *rand.Rand) *counterGen {
	return &counterGen{cfg: cfg, host: h, rng: rng, pod: servicePod(cfg.Service, h.Index),
		softirq: make([]float64, cfg.CPUs), user: make([]float64, cfg.CPUs),
		idle: make([]float64, cfg.CPUs), iowait: make([]float64, cfg.CPUs)}
}

// jitter multiplies v by 1 ± a few percent.
func (g *counterGen) jitter(v float64) float64 { return math.Max(0, v*(1+0.05*g.rng.NormFloat64())) }

// stalledWrites are the writes issued, at rate per second, during the
// disk stalls that end inside [a, b), and the seconds they waited in all:
// each waits from its issue to the stall's end, so a stall of L seconds
// holds rate × L writes that waited L/2 on average. Call it after overlap,
// which moves next past the stalls over before a.
func (g *counterGen) stalledWrites(a, b time.Time, rate float64) (n, waited float64) {
	for _, s := range g.host.Stalls[g.next:] {
		if !s.Start.Before(b) {
			break
		}
		if s.Cause != CauseDisk || s.End().Before(a) || !s.End().Before(b) {
			continue
		}
		l := s.Length.Seconds()
		n += rate * l
		waited += rate * l * l / 2
	}
	return n, waited
}

// overlap is how many seconds of stalls of cause lie inside [a, b).
func (g *counterGen) overlap(a, b time.Time, cause string) float64 {
	for g.next < len(g.host.Stalls) && !g.host.Stalls[g.next].End().After(a) {
		g.next++
	}
	var sum time.Duration
	for _, s := range g.host.Stalls[g.next:] {
		if !s.Start.Before(b) {
			break
		}
		if s.Cause != cause {
			continue
		}
		lo, hi := s.Start, s.End()
		if lo.Before(a) {
			lo = a
		}
		if hi.After(b) {
			hi = b
		}
		sum += hi.Sub(lo)
	}
	return sum.Seconds()
}

// interval appends the points of the measured interval [a, b) to out.
func (g *counterGen) interval(a, b time.Time, out []telemetry.Point) []telemetry.Point {
	T := b.Sub(a).Seconds()
	f := load(a)
	hasDown := g.cfg.Cause == CauseDownIface && len(g.host.Stalls) > 0
	storm := g.overlap(a, b, CauseNICSoftirq)
	burst := g.overlap(a, b, CauseDownIface)
	diskStall := g.overlap(a, b, CauseDisk)
	add := func(metric, unit string, v float64, attrs ...telemetry.Attr) {
		out = append(out, telemetry.Point{Metric: metric, Unit: unit, Start: a, End: b, Value: v, Attrs: attrs})
	}
	cpu := func(c int) telemetry.Attr { return telemetry.Int("cpu.logical_number", int64(c)) }

	// CPU time by mode; idle takes what the rest leave.
	for c := 0; c < g.cfg.CPUs; c++ {
		g.user[c] = g.jitter(T * 0.15 * f)
		g.softirq[c] = g.jitter(T * 0.01 * f)
		g.iowait[c] = g.jitter(T * 0.005)
	}
	if storm > 0 {
		for _, c := range stormCPUs {
			g.softirq[c] += 0.95 * storm
			g.user[c] = math.Max(0, g.user[c]-0.15*storm)
		}
	}
	if burst > 0 {
		g.softirq[downIfaceCPU] += 0.6 * burst
	}
	if diskStall > 0 {
		g.iowait[3%g.cfg.CPUs] += 0.5 * diskStall
	}
	// A neighbour's batch job is user time on the CPUs it shares with the
	// service: the echo of the cause, not its name.
	if neighbour := g.overlap(a, b, CauseNeighbour); neighbour > 0 {
		for _, c := range neighbourCPUs {
			g.user[c%g.cfg.CPUs] += 0.95 * neighbour
		}
	}
	for c := 0; c < g.cfg.CPUs; c++ {
		system, irq := g.jitter(T*0.05*f), g.jitter(T*0.003)
		busy := g.user[c] + system + g.iowait[c] + irq + g.softirq[c]
		if busy > T {
			scale := T / busy
			g.user[c] *= scale
			system *= scale
			g.iowait[c] *= scale
			irq *= scale
			g.softirq[c] *= scale
			busy = T
		}
		g.idle[c] = T - busy
		for i, v := range [...]float64{g.user[c], system, g.idle[c], g.iowait[c], irq, g.softirq[c]} {
			add("system.cpu.time", "s", v, cpu(c), telemetry.Str("cpu.mode", cpuModes[i]))
		}
	}
	// Softirqs raised per vector per CPU.
	for c := 0; c < g.cfg.CPUs; c++ {
		rx := g.jitter(T * 1500 * f)
		switch {
		case storm > 0 && isStormCPU(c):
			rx += storm * 150_000
		case burst > 0 && c == downIfaceCPU:
			rx += burst * 60_000
		}
		for _, v := range softirqVectors {
			val := rx
			switch v {
			case "TIMER":
				val = g.jitter(T * 250)
			case "BLOCK":
				val = g.jitter(T * 20 * f)
			}
			add("spikehunt.softirqs", "{softirq}", math.Round(val), cpu(c), telemetry.Str("spikehunt.softirq.vector", v))
		}
	}
	// NICs: every interface, its operstate on each point.
	up := telemetry.Str("network.interface.name", upIface)
	rxPk := g.jitter(T*40*g.cfg.RPS*f) + storm*400_000
	add("system.network.packet.count", "{packet}", math.Round(rxPk), up, recv, stateUp)
	add("system.network.packet.count", "{packet}", math.Round(g.jitter(T*35*g.cfg.RPS*f)), up, xmit, stateUp)
	add("system.network.packet.dropped", "{packet}", math.Round(g.rng.ExpFloat64()*0.02*T+storm*5000), up, recv, stateUp)
	down := telemetry.Str("network.interface.name", downIface)
	downRx := 0.0
	if hasDown {
		downRx = math.Round(g.jitter(T*5) + burst*80_000) // a hub's trickle, then its bursts
	}
	add("system.network.packet.count", "{packet}", downRx, down, recv, stateDown)
	add("system.network.packet.count", "{packet}", 0, down, xmit, stateDown)
	add("system.network.packet.dropped", "{packet}", downRx, down, recv, stateDown)
	// The disk: operations, their time, and busy time. Reads take 0.5 ms
	// and writes 0.8 ms, but the writes issued during a disk stall, which
	// wait until it ends and are counted, with their time, when they
	// complete (as diskstats counts them).
	writeRate := 50 * f
	reads, writes := g.jitter(T*30*f), g.jitter((T-diskStall)*writeRate)
	stalled, waited := g.stalledWrites(a, b, writeRate)
	add("system.disk.operations", "{operation}", math.Round(reads), diskAttr, diskRead)
	add("system.disk.operations", "{operation}", math.Round(writes+stalled), diskAttr, diskWrite)
	add("system.disk.operation_time", "s", g.jitter(reads*0.0005), diskAttr, diskRead)
	add("system.disk.operation_time", "s", g.jitter(writes*0.0008)+waited, diskAttr, diskWrite)
	add("system.disk.io_time", "s", math.Min(T, g.jitter(T*0.03*f)+diskStall), diskAttr)
	// Run delay per CPU, pressure, slab, context switches.
	for c := 0; c < g.cfg.CPUs; c++ {
		add("spikehunt.cpu.run_delay", "s", g.jitter(T*0.002*f), cpu(c))
	}
	for _, r := range [...]struct {
		name string
		v    float64
	}{{"cpu", T * 0.004 * f}, {"memory", T * 0.0002}, {"io", T*0.001 + 0.2*diskStall}} {
		add("spikehunt.pressure.stall_time", "s", g.jitter(r.v), telemetry.Str("spikehunt.pressure.resource", r.name), psiSome)
	}
	out = append(out, telemetry.Point{Metric: "spikehunt.memory.slab", Unit: "By", Start: b, End: b,
		Value: math.Round(g.jitter(300 << 20)), Attrs: []telemetry.Attr{telemetry.Str("spikehunt.memory.slab.kind", "total")}})
	add("spikehunt.context_switches", "{switch}", math.Round(g.jitter(T*6000*f)))
	if EverydayCause(g.cfg.Cause) {
		out = g.everyday(a, b, out)
	}
	return out
}

// EverydayCause says whether a cause is one of the everyday ones, whose
// fleets carry the series everyday emits; the others' fleets do without
// them, and cost what they did before those series existed.
func EverydayCause(cause string) bool {
	switch cause {
	case CauseCPUThrottle, CauseNeighbour, CauseReclaim, CauseTCPListen:
		return true
	}
	return false
}

// Workload cgroups as the agent names them (agents/collect: a pod as
// namespace/pod, a systemd unit by its path): the service's own pod, whose
// name differs on every host as a Deployment's pods do; the node's kubelet;
// and a backup job that idles between its runs.
const (
	neighbourUnit = "system.slice/backup.service"
	kubeletUnit   = "system.slice/kubelet.service"
	// serviceLimitCPUs is the pod's CPU limit; its CFS period is 100 ms.
	serviceLimitCPUs = 0.5
)

// servicePodPrefix is what the service's pods' names share: namespace,
// Deployment and ReplicaSet hash.
func servicePodPrefix(service string) string { return "shop/" + service + "-7d9c8b6f5-" }

// servicePod is the service's pod on host i: the prefix and five
// characters of its own.
func servicePod(service string, i int) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	var suffix [5]byte
	for k := range suffix {
		suffix[k] = alphabet[i%len(alphabet)]
		i /= len(alphabet)
	}
	return servicePodPrefix(service) + string(suffix[:])
}

// everyday appends the series the everyday causes move: the workload
// cgroups' CPU and throttling, /proc/vmstat's reclaim and faults, and the
// TCP counters of /proc/net/snmp and netstat. Each is near zero on a
// healthy host, as on real ones, but for CPU usage and retransmits.
func (g *counterGen) everyday(a, b time.Time, out []telemetry.Point) []telemetry.Point {
	T := b.Sub(a).Seconds()
	f := load(a)
	throttle := g.overlap(a, b, CauseCPUThrottle)
	neighbour := g.overlap(a, b, CauseNeighbour)
	reclaim := g.overlap(a, b, CauseReclaim)
	listen := g.overlap(a, b, CauseTCPListen)
	add := func(metric, unit string, v float64, attrs ...telemetry.Attr) {
		out = append(out, telemetry.Point{Metric: metric, Unit: unit, Start: a, End: b, Value: v, Attrs: attrs})
	}
	// A count that is zero but for the odd event.
	rare := func(perSecond float64) float64 { return math.Floor(g.rng.ExpFloat64() * perSecond * T) }

	pod := telemetry.Str("spikehunt.cgroup", g.pod)
	// Throttled, the pod's threads get half their periods' worth of CPU at
	// most; the time its four runqueues spend throttled is what it lost.
	add("spikehunt.cgroup.cpu.usage", "s", math.Min(T*serviceLimitCPUs, g.jitter(T*0.2*f)), pod)
	add("spikehunt.cgroup.cpu.periods", "{period}", math.Round(T*10), pod)
	add("spikehunt.cgroup.cpu.throttled_periods", "{period}", math.Round(throttle*9), pod)
	add("spikehunt.cgroup.cpu.throttled_time", "s", throttle*2.4, pod)
	out = append(out, telemetry.Point{Metric: "spikehunt.cgroup.cpu.limit", Unit: "{cpu}", Start: b, End: b, Value: serviceLimitCPUs, Attrs: []telemetry.Attr{pod}})
	add("spikehunt.cgroup.cpu.usage", "s", g.jitter(T*0.02)+neighbour*1.9, telemetry.Str("spikehunt.cgroup", neighbourUnit))
	add("spikehunt.cgroup.cpu.usage", "s", g.jitter(T*0.05*f), telemetry.Str("spikehunt.cgroup", kubeletUnit))

	add("spikehunt.memory.reclaim.scanned", "{page}", rare(0.01)+reclaim*3100)
	add("spikehunt.memory.reclaim.stalls", "{stall}", rare(0.001)+reclaim*40)
	add("spikehunt.memory.compaction.stalls", "{stall}", rare(0.001)+reclaim*6)
	add("spikehunt.memory.major_faults", "{fault}", math.Round(g.jitter(T*2*f))+reclaim*150)
	if reclaim > 0 {
		add("spikehunt.pressure.stall_time", "s", 0.4*reclaim, telemetry.Str("spikehunt.pressure.resource", "memory"), psiSome)
	}

	add("spikehunt.tcp.retransmits", "{segment}", math.Round(g.jitter(T*0.02*g.cfg.RPS*f)))
	add("spikehunt.tcp.syn_retransmits", "{segment}", rare(0.01)+listen*200)
	add("spikehunt.tcp.listen_overflows", "{overflow}", listen*400)
	add("spikehunt.tcp.listen_drops", "{drop}", listen*400)
	return out
}

// neighbourCPUs are the CPUs the backup job shares with the service.
var neighbourCPUs = []int{2, 3}

func isStormCPU(c int) bool {
	for _, s := range stormCPUs {
		if s == c {
			return true
		}
	}
	return false
}
