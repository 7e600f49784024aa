package capturestrategy

import (
	"errors"
	"fmt"
	"time"

	"github.com/spikehunt/spikehunt/internal/policy"
	"github.com/spikehunt/spikehunt/internal/vocab"
)

// Pattern is a recurrence pattern the simulated fleet carries: Fraction of
// the hosts (of OnlyClass alone when it is set) stall for a second every
// PeriodMin–PeriodMax, each host at its own phase.
type Pattern struct {
	Name                 string
	Fraction             float64
	PeriodMin, PeriodMax time.Duration
	// OnlyClass, when set, keeps the stalls of that hardware class's hosts
	// and drops the others': a pattern of one class.
	OnlyClass string
}

// Period is the pattern's typical recurrence period, the unit of delay.
func (p Pattern) Period() time.Duration { return (p.PeriodMin + p.PeriodMax) / 2 }

// Patterns are the three patterns of the measurement (docs/benchmarks.md,
// "Capture strategy, measured"): every host every ~17 min; 20% of the hosts
// every ~15 min; every host of the smallest class, gen6, every ~17 min.
func Patterns() []Pattern {
	return []Pattern{
		{Name: "every-host-17m", Fraction: 1, PeriodMin: 16 * time.Minute, PeriodMax: 18 * time.Minute},
		{Name: "20pct-hosts-15m", Fraction: 0.2, PeriodMin: 14 * time.Minute, PeriodMax: 16 * time.Minute},
		{Name: "one-class-17m", Fraction: 1, PeriodMin: 16 * time.Minute, PeriodMax: 18 * time.Minute, OnlyClass: "gen6"},
	}
}

// DefaultHWClasses: hosts take the classes in turn, so gen4 has half the
// fleet, gen5 a quarter, gen6 and arm1 an eighth each.
var DefaultHWClasses = []string{"gen4", "gen4", "gen4", "gen4", "gen5", "gen5", "gen6", "arm1"}

// Config is one simulated trial: a fleet, a pattern, and the operator's
// policy as the sample CapturePolicy (operator/config/samples) sets it.
type Config struct {
	Hosts int
	// HWClasses are dealt to the hosts in turn (host i gets
	// HWClasses[i % len]): a class listed twice has twice the hosts.
	// Default DefaultHWClasses.
	HWClasses []string
	Pattern   Pattern
	Seed      uint64

	// The policy: Sampling.Percent is the bait; the rest defaults to the
	// sample CapturePolicy (rotation 1h, widenBy 3 for fleet-recurrent and
	// fleet-synchronized alerts, the CRD's budget defaults: 20 at once,
	// 30 min per node, 6 per pattern per hour).
	BaitPercent    int
	RotationPeriod time.Duration
	WidenBy        int
	PatternClasses []string
	Budgets        policy.Budgets
	// Decide is the policy under test; policy.Decide when nil.
	Decide func(policy.Input) (policy.Decision, error)

	// The recorder and the platform around it. Pre and Post are the
	// profile's window (CRD defaults 10 s and 2 s); ArmDelay is from the
	// Capture's creation to the agent's armed recorder; TriggerDelay from
	// a stall's start to the fire (the local trigger fires within 100 ms);
	// IndexDelay from the end of the post-window to the Indexed phase
	// (upload to S3, the capture controller's index row).
	Pre, Post    time.Duration
	ArmDelay     time.Duration
	TriggerDelay time.Duration
	IndexDelay   time.Duration

	// DetectEvery is the detector's pass interval (spikehunt detect
	// --every, 30 s); Lookback the patterns' look-back (6 h).
	DetectEvery time.Duration
	Lookback    time.Duration
	// AlertTTL is how long the operator's inbox keeps an alert whose
	// armings the budgets have not let through (15 min).
	AlertTTL time.Duration
	// Horizon is how many recurrence periods after detection the trial
	// follows; a class not covered by then counts as never.
	Horizon int
	// MaxDetect bounds the wait for the detection: a trial whose pattern
	// the detector has not alerted by then ends undetected.
	MaxDetect time.Duration
}

// DefaultConfig is a 1,000-host fleet with the first pattern at 5% bait.
func DefaultConfig() Config {
	return Config{
		Hosts: 1000, HWClasses: DefaultHWClasses, Pattern: Patterns()[0], Seed: 1,
		BaitPercent: 5, RotationPeriod: time.Hour, WidenBy: 3,
		PatternClasses: []string{vocab.ClassFleetRecurrent, vocab.ClassFleetSynchronized},
		Budgets:        policy.Budgets{MaxConcurrentPerFleet: 20, PerNodeCooldown: 30 * time.Minute, MaxPerPatternPerHour: 6},
		Pre:            10 * time.Second, Post: 2 * time.Second,
		ArmDelay: 2 * time.Second, TriggerDelay: 100 * time.Millisecond, IndexDelay: 5 * time.Second,
		DetectEvery: 30 * time.Second, Lookback: 6 * time.Hour, AlertTTL: 15 * time.Minute,
		Horizon: 6, MaxDetect: 3 * time.Hour,
	}
}

// Validate checks the bounds; it does not change c.
func (c Config) Validate() error {
	p := c.Pattern
	switch {
	case c.Hosts < 10 || c.Hosts > 100_000:
		return fmt.Errorf("capture strategy: %d hosts, want 10–100000", c.Hosts)
	case len(c.HWClasses) == 0:
		return errors.New("capture strategy: no hardware classes")
	case p.Fraction <= 0 || p.Fraction > 1:
		return fmt.Errorf("capture strategy: pattern %q: fraction %g, want (0, 1]", p.Name, p.Fraction)
	case p.PeriodMin < time.Minute || p.PeriodMax < p.PeriodMin:
		return fmt.Errorf("capture strategy: pattern %q: period %s–%s, want ≥ 1m and min ≤ max", p.Name, p.PeriodMin, p.PeriodMax)
	case c.BaitPercent < 0 || c.BaitPercent > 100:
		return fmt.Errorf("capture strategy: bait %d%%, want 0–100", c.BaitPercent)
	case c.WidenBy < 0:
		return fmt.Errorf("capture strategy: widen by %d, want ≥ 0", c.WidenBy)
	case c.Pre < 0 || c.Post < 0 || c.ArmDelay < 0 || c.TriggerDelay < 0 || c.IndexDelay < 0:
		return errors.New("capture strategy: a window or delay is negative")
	case c.DetectEvery < time.Second || c.Lookback < c.DetectEvery:
		return fmt.Errorf("capture strategy: detector every %s over %s, want ≥ 1s and a look-back at least as long", c.DetectEvery, c.Lookback)
	case c.AlertTTL <= 0:
		return fmt.Errorf("capture strategy: alert TTL %s, want > 0", c.AlertTTL)
	case c.Horizon < 1 || c.MaxDetect <= 0:
		return fmt.Errorf("capture strategy: horizon %d periods and detection wait %s, want ≥ 1 and > 0", c.Horizon, c.MaxDetect)
	}
	if p.OnlyClass != "" {
		found := false
		for _, hc := range c.HWClasses {
			found = found || hc == p.OnlyClass
		}
		if !found {
			return fmt.Errorf("capture strategy: pattern %q is of class %q, which no host has (classes %v)", p.Name, p.OnlyClass, c.HWClasses)
		}
	}
	s := policy.Sampling{Percent: c.BaitPercent, RotationPeriod: c.RotationPeriod}
	if err := s.Validate(); err != nil {
		return fmt.Errorf("capture strategy: %w", err)
	}
	return c.Budgets.Validate()
}
