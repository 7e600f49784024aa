package policy

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// ErrInvalid is wrapped by every error Validate and Decide return: the
// input, not the cluster, is wrong, and retrying will not help.
var ErrInvalid = errors.New("policy: invalid input")

// DefaultHWClassLabel is the node label that carries the hardware class
// when Sampling.HWClassLabel is empty; the agent reads the same label.
const DefaultHWClassLabel = "spikehunt.io/hw-class"

// MinRotationPeriod is the shortest rotation Validate accepts. Every
// rotation expires and re-arms bait fleet-wide, so a shorter period would
// spend the budgets on churn rather than on captures.
const MinRotationPeriod = time.Second

// PatternWindow is the sliding window of Budgets.MaxPerPatternPerHour.
const PatternWindow = time.Hour

// Sampling says which nodes get bait: a share of the fleet, stratified by
// hardware class, dealt anew every RotationPeriod.
type Sampling struct {
	// Percent of the nodes get bait, rounded up (1% of 50 nodes is 1
	// node). Used when Count is 0.
	Percent int
	// Count nodes get bait (all of them when there are fewer). Set Count
	// or Percent, not both.
	Count int
	// RotationPeriod is how long one sample lasts. 0 never rotates: the
	// sample stays the same for as long as the nodes do.
	RotationPeriod time.Duration
	// HWClassLabel is the node label with the hardware class, for nodes
	// whose Node.HWClass is empty. Default DefaultHWClassLabel.
	HWClassLabel string
}

// Validate checks the bounds: Percent in [0, 100], Count ≥ 0, not both,
// RotationPeriod 0 or ≥ MinRotationPeriod.
func (s Sampling) Validate() error {
	switch {
	case s.Percent < 0 || s.Percent > 100:
		return fmt.Errorf("%w: sampling: percent %d is outside [0, 100]", ErrInvalid, s.Percent)
	case s.Count < 0:
		return fmt.Errorf("%w: sampling: count %d is negative", ErrInvalid, s.Count)
	case s.Count > 0 && s.Percent > 0:
		return fmt.Errorf("%w: sampling: both count (%d) and percent (%d) are set; set one", ErrInvalid, s.Count, s.Percent)
	case s.RotationPeriod < 0:
		return fmt.Errorf("%w: sampling: rotation period %s is negative", ErrInvalid, s.RotationPeriod)
	case s.RotationPeriod > 0 && s.RotationPeriod < MinRotationPeriod:
		return fmt.Errorf("%w: sampling: rotation period %s is below %s (0 disables rotation)", ErrInvalid, s.RotationPeriod, MinRotationPeriod)
	}
	return nil
}

// target is how many of n nodes get bait. It clamps what Validate would
// reject, so that Sample is total.
func (s Sampling) target(n int) int {
	if n <= 0 {
		return 0
	}
	if s.Count > 0 {
		return min(s.Count, n)
	}
	p := min(max(s.Percent, 0), 100)
	return (n*p + 99) / 100
}

func (s Sampling) classLabel() string {
	if s.HWClassLabel == "" {
		return DefaultHWClassLabel
	}
	return s.HWClassLabel
}

// Budgets bound what all policies together may arm. A zero field means no
// limit, so the CRD must default them: a policy without budgets arms every
// node an alert storm names.
type Budgets struct {
	// MaxConcurrentPerFleet bounds the active armings of every policy
	// together.
	MaxConcurrentPerFleet int
	// PerNodeCooldown is the least time between the starts of two armings
	// on one node, whatever their policies. A node never has two active
	// armings, cooldown or not.
	PerNodeCooldown time.Duration
	// MaxPerPatternPerHour bounds the armings started for one pattern key
	// within any PatternWindow, finished ones included. Bait, which no
	// pattern asked for, is not counted.
	MaxPerPatternPerHour int
}

// Validate checks that no budget is negative.
func (b Budgets) Validate() error {
	switch {
	case b.MaxConcurrentPerFleet < 0:
		return fmt.Errorf("%w: budgets: max concurrent per fleet %d is negative", ErrInvalid, b.MaxConcurrentPerFleet)
	case b.PerNodeCooldown < 0:
		return fmt.Errorf("%w: budgets: per-node cooldown %s is negative", ErrInvalid, b.PerNodeCooldown)
	case b.MaxPerPatternPerHour < 0:
		return fmt.Errorf("%w: budgets: max per pattern per hour %d is negative", ErrInvalid, b.MaxPerPatternPerHour)
	}
	return nil
}

// AlertTrigger says which fleet alerts widen the sample, and by how much.
type AlertTrigger struct {
	// Services the alert must be about; empty matches every service. The
	// controller usually puts the policy's own service here.
	Services []string
	// PatternClasses the alert's pattern must have (fleet-recurrent,
	// fleet-synchronized, isolated-host). Empty matches every alert,
	// spike groups included; non-empty matches pattern alerts only.
	PatternClasses []string
	// ExtraNodes is how many nodes one matching alert arms beyond the
	// sample, over its whole life (a re-sent alert adds no more), and at
	// least one per hardware class the alert names hosts of: the per-class
	// coverage a pattern needs comes from the hosts it is known on, not
	// from bait that may never see it (docs/benchmarks.md, "Capture
	// strategy, measured"). 0 turns widening off.
	ExtraNodes int
}

// Validate checks that ExtraNodes is not negative.
func (t AlertTrigger) Validate() error {
	if t.ExtraNodes < 0 {
		return fmt.Errorf("%w: alert trigger: extra nodes %d is negative", ErrInvalid, t.ExtraNodes)
	}
	return nil
}

// Matches reports whether the alert widens the sample. A resolved pattern
// never does.
func (t AlertTrigger) Matches(a Alert) bool {
	if t.ExtraNodes == 0 || a.Resolved {
		return false
	}
	if len(t.Services) > 0 && !slices.Contains(t.Services, a.Service) {
		return false
	}
	if len(t.PatternClasses) > 0 && (a.PatternClass == "" || !slices.Contains(t.PatternClasses, a.PatternClass)) {
		return false
	}
	return true
}
