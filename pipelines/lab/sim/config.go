package sim

import (
	"errors"
	"fmt"
	"time"
)

// Config describes one simulated fleet. Zero fields take the scenario's
// defaults (Defaults), so a caller sets only what it wants to vary.
type Config struct {
	Scenario string // one of Scenarios()
	Service  string // default "checkout"
	Seed     uint64 // the same seed and config give the same fleet, byte for byte

	Hosts     int           // fleet size (default 300)
	HWClasses []string      // hardware classes, hosts spread evenly (default gen4, gen5)
	Start     time.Time     // first simulated second (default: Duration before the current hour)
	Duration  time.Duration // simulated time (default 6 h)

	RPS         float64 // mean requests per second per host before the diurnal swing (default 30)
	MedianUS    float64 // median latency of the lognormal body (default 4 ms)
	Sigma       float64 // lognormal shape (default 0.5)
	SampleEvery int     // the agent keeps 1 in SampleEvery of the fast requests (weight = SampleEvery); slow ones always (default 30)
	// A body with two modes (a cache): MissShare of the requests miss,
	// and their lognormal's median is MissFactor × the hits' (default
	// none: one mode).
	MissShare, MissFactor float64
	CPUs                  int           // logical CPUs per host (default 8; the NIC storm needs ≥ 7)
	CounterStep           time.Duration // kernel counter interval (default 10 s)

	// Spike timing. Not every scenario uses every field.
	PeriodMin, PeriodMax time.Duration // per-host recurrence period is drawn from [PeriodMin, PeriodMax]
	Jitter               float64       // each interval varies by ± Jitter × period
	Fraction             float64       // share of hosts affected (at least one host when > 0)
	SpikeLength          time.Duration // how long one stall lasts
	SkewClass            string        // hardware class that spikes more often (thousand-spikes)
	Skew                 float64       // how many times more often (default 2)
	Noise                float64       // extra independent spikes per host per hour, in any scenario
	Creep                float64       // slow-creep: latency multiplier reached at the end (default 5)
	Cause                string        // what the kernel counters show during a spike: see Causes()

	// The agents' own figures (self.go). CaptureBudget is each agent's
	// maximum of concurrent captures (spikehunt.capture.max_concurrent);
	// 0 means capture is off and the agents send no capture gauges.
	// CaptureArmed is the share of hosts with one capture armed for the
	// whole run (bait), chosen per host from the seed.
	CaptureBudget int
	CaptureArmed  float64
}

// Scenario names.
const (
	Healthy         = "healthy"
	ThousandSpikes  = "thousand-spikes"
	BadHost         = "bad-host"
	Synchronized    = "synchronized"
	NICSoftirqStorm = "nic-softirq-storm"
	DownInterface   = "down-interface"
	IOStall         = "io-stall"
	SlowCreep       = "slow-creep"
	Noisy           = "noisy"
	// EndpointStall: a dependency of one endpoint in four stalls (a
	// payment gateway behind /checkout), not the host: only that
	// endpoint's requests wait, at a few requests per second per host, so
	// most seconds of a stall hold one or two slow requests among the
	// host's others.
	EndpointStall = "endpoint-stall"
	// The everyday causes, each on a part of the fleet.
	CPUThrottle   = "cpu-throttle"    // the pod's CPU limit, on the third of the hosts it runs on
	NoisyNeighbor = "noisy-neighbour" // a backup job every 15–20 min, twice as often on gen5
	Reclaim       = "reclaim"         // direct reclaim on the 40% of hosts near their memory limit
	TCPListen     = "tcp-listen"      // listen-queue overflows on half the hosts
)

// Causes: what, in the kernel, goes with a spike.
const (
	CauseNone       = "none"        // the process itself waits (a library sleeps): no counter moves
	CauseNICSoftirq = "nic-softirq" // NET_RX softirq saturates CPUs 0, 2, 4, 6 (RSS over four queues)
	CauseDownIface  = "down-iface"  // a down interface receives a burst; softirq time on one CPU
	CauseDisk       = "disk"        // the disk stalls: writes issued meanwhile wait for its end; IO-doing requests stall
	// The everyday causes.
	CauseCPUThrottle = "cpu-throttle" // the service's pod runs out of its CFS quota: its threads wait, throttled
	CauseNeighbour   = "neighbour"    // a batch job in another cgroup (backup.service) takes the service's CPUs
	CauseReclaim     = "reclaim"      // allocating threads enter direct reclaim and compaction
	CauseTCPListen   = "tcp-listen"   // a connection burst overflows the listen queue; clients retry their SYN 1 s later
)

// Scenarios lists the scenario names in a stable order.
func Scenarios() []string {
	return []string{Healthy, ThousandSpikes, BadHost, Synchronized, NICSoftirqStorm, DownInterface, IOStall, SlowCreep, Noisy, EndpointStall,
		CPUThrottle, NoisyNeighbor, Reclaim, TCPListen}
}

// Causes lists the cause names.
func Causes() []string {
	return []string{CauseNone, CauseNICSoftirq, CauseDownIface, CauseDisk, CauseCPUThrottle, CauseNeighbour, CauseReclaim, CauseTCPListen}
}

// Defaults returns the scenario's configuration with every zero field of c
// filled. Fields c sets are kept.
func (c Config) Defaults() Config {
	d := Config{
		Service: "checkout", Hosts: 300, HWClasses: []string{"gen4", "gen5"}, Duration: 6 * time.Hour,
		RPS: 30, MedianUS: 4000, Sigma: 0.5, SampleEvery: 30, CPUs: 8, CounterStep: 10 * time.Second,
		PeriodMin: 15 * time.Minute, PeriodMax: 20 * time.Minute, Jitter: 0.03, Fraction: 1,
		SpikeLength: time.Second, Skew: 1, Creep: 1, Cause: CauseNone,
	}
	switch c.Scenario {
	case ThousandSpikes:
		d.SkewClass, d.Skew = "gen5", 2
	case BadHost:
		// One host, at random times: a mean interval of PeriodMin.
		d.PeriodMin, d.PeriodMax, d.Fraction = 3*time.Minute, 3*time.Minute, 0
	case Synchronized:
		d.PeriodMin, d.PeriodMax, d.SpikeLength, d.Jitter = time.Hour, time.Hour, 30*time.Second, 0
	case NICSoftirqStorm:
		d.Fraction, d.SpikeLength, d.Cause = 0.4, 3*time.Second, CauseNICSoftirq
	case DownInterface:
		// The down interface (docs/field-stories.md) is one server: a few hosts, each with bursts on its own period.
		d.Fraction, d.PeriodMin, d.PeriodMax, d.SpikeLength, d.Cause = 0.01, 10*time.Minute, 14*time.Minute, 5*time.Second, CauseDownIface
	case IOStall:
		d.Fraction, d.PeriodMin, d.PeriodMax, d.SpikeLength, d.Cause = 0.5, 20*time.Minute, 30*time.Minute, 2*time.Second, CauseDisk
	case SlowCreep:
		d.Creep = 5
	case Noisy:
		d.Noise = 1.0 / 5 // one spike per host per 5 h
	case CPUThrottle:
		d.Fraction, d.Cause = 0.3, CauseCPUThrottle
	case NoisyNeighbor:
		d.SpikeLength, d.SkewClass, d.Skew, d.Cause = 5*time.Second, "gen5", 2, CauseNeighbour
	case Reclaim:
		d.Fraction, d.SpikeLength, d.Cause = 0.4, 2*time.Second, CauseReclaim
	case TCPListen:
		d.Fraction, d.Cause = 0.5, CauseTCPListen
	case EndpointStall:
		// A storefront of four equally used endpoints at 8 requests per
		// second per host: 2 per second reach /checkout, whose dependency
		// stalls 1 s every 15–20 min on every host.
		d.Service, d.RPS = "storefront", 8
	}
	if c.Service == "" {
		c.Service = d.Service
	}
	if c.Hosts == 0 {
		c.Hosts = d.Hosts
	}
	if len(c.HWClasses) == 0 {
		c.HWClasses = d.HWClasses
	}
	if c.Duration == 0 {
		c.Duration = d.Duration
	}
	if c.Start.IsZero() {
		c.Start = time.Now().UTC().Truncate(time.Hour).Add(-c.Duration)
	}
	c.Start = c.Start.UTC()
	setF := func(p *float64, v float64) {
		if *p == 0 {
			*p = v
		}
	}
	setD := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	setF(&c.RPS, d.RPS)
	setF(&c.MedianUS, d.MedianUS)
	setF(&c.Sigma, d.Sigma)
	if c.SampleEvery == 0 {
		c.SampleEvery = d.SampleEvery
	}
	if c.CPUs == 0 {
		c.CPUs = d.CPUs
	}
	setD(&c.CounterStep, d.CounterStep)
	setD(&c.PeriodMin, d.PeriodMin)
	setD(&c.PeriodMax, max(d.PeriodMax, c.PeriodMin))
	setF(&c.Jitter, d.Jitter)
	setF(&c.Fraction, d.Fraction)
	setD(&c.SpikeLength, d.SpikeLength)
	if c.SkewClass == "" {
		c.SkewClass = d.SkewClass
	}
	setF(&c.Skew, d.Skew)
	setF(&c.Noise, d.Noise)
	setF(&c.Creep, d.Creep)
	if c.Cause == "" {
		c.Cause = d.Cause
	}
	return c
}

// Validate checks a filled configuration (call Defaults first).
func (c Config) Validate() error {
	known := func(v string, list []string) bool {
		for _, s := range list {
			if s == v {
				return true
			}
		}
		return false
	}
	switch {
	case !known(c.Scenario, Scenarios()):
		return fmt.Errorf("sim: unknown scenario %q (one of %v)", c.Scenario, Scenarios())
	case !known(c.Cause, Causes()):
		return fmt.Errorf("sim: unknown cause %q (one of %v)", c.Cause, Causes())
	case c.Hosts < 1 || c.Hosts > 100_000:
		return fmt.Errorf("sim: %d hosts, want 1–100000", c.Hosts)
	case c.Duration < time.Minute || c.Duration > 30*24*time.Hour:
		return fmt.Errorf("sim: duration %s, want 1m–720h", c.Duration)
	case c.RPS <= 0 || c.RPS > 10_000:
		return fmt.Errorf("sim: %g requests/s per host, want (0, 10000]", c.RPS)
	case c.MedianUS < 10 || c.Sigma <= 0 || c.Sigma > 3:
		return errors.New("sim: the latency body needs a median ≥ 10 µs and 0 < sigma ≤ 3")
	case c.SampleEvery < 1:
		return fmt.Errorf("sim: sample every %d, want ≥ 1", c.SampleEvery)
	case c.MissShare < 0 || c.MissShare >= 1 || c.MissShare > 0 && (c.MissFactor < 1 || c.MissFactor > 1e4):
		return fmt.Errorf("sim: miss share %g × %g, want a share in [0, 1) and a factor of 1–10000", c.MissShare, c.MissFactor)
	case c.CPUs < 1 || c.CPUs > 1024:
		return fmt.Errorf("sim: %d CPUs, want 1–1024", c.CPUs)
	case c.Cause == CauseNICSoftirq && c.CPUs < 7:
		return fmt.Errorf("sim: the NIC softirq storm pins CPUs 0, 2, 4, 6: it needs ≥ 7 CPUs, not %d", c.CPUs)
	case c.CounterStep < time.Second || c.CounterStep > 5*time.Minute:
		return fmt.Errorf("sim: counter step %s, want 1s–5m", c.CounterStep)
	case c.PeriodMin < 10*time.Second || c.PeriodMax < c.PeriodMin:
		return fmt.Errorf("sim: period %s–%s, want ≥ 10s and min ≤ max", c.PeriodMin, c.PeriodMax)
	case c.Jitter < 0 || c.Jitter >= 1:
		return fmt.Errorf("sim: jitter %g, want [0, 1)", c.Jitter)
	case c.Fraction < 0 || c.Fraction > 1:
		return fmt.Errorf("sim: fraction %g, want [0, 1]", c.Fraction)
	case c.SpikeLength < 100*time.Millisecond || c.SpikeLength > 10*time.Minute:
		return fmt.Errorf("sim: spike length %s, want 100ms–10m", c.SpikeLength)
	case c.Skew < 1 || c.Skew > 100:
		return fmt.Errorf("sim: skew %g, want 1–100", c.Skew)
	case c.Noise < 0 || c.Noise > 60:
		return fmt.Errorf("sim: noise %g spikes per host-hour, want 0–60", c.Noise)
	case c.Creep < 1 || c.Creep > 100:
		return fmt.Errorf("sim: creep ×%g, want 1–100", c.Creep)
	case len(c.HWClasses) == 0:
		return errors.New("sim: no hardware classes")
	case c.CaptureBudget < 0 || c.CaptureBudget > 64:
		return fmt.Errorf("sim: capture budget %d, want 0 (capture off) to 64", c.CaptureBudget)
	case c.CaptureArmed < 0 || c.CaptureArmed > 1:
		return fmt.Errorf("sim: armed share %g, want [0, 1]", c.CaptureArmed)
	case c.CaptureArmed > 0 && c.CaptureBudget == 0:
		return errors.New("sim: captures armed on hosts whose capture is off: give a capture budget")
	}
	return nil
}
