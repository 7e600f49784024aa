package alerts

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/defaults"
)

// Config sets the Publisher's dedupe, rate limit and alert sizes. A zero
// field means its default (WithDefaults; NewPublisher and Decide fill them).
type Config struct {
	// SpikeGroupsPerMinute is the rate at which a service earns spike-group
	// alerts, and SpikeGroupBurst how many it may send at once (a token
	// bucket per service). Alerts over the rate are held back and their
	// windows folded into the service's next alert. Defaults 2 and 3.
	SpikeGroupsPerMinute float64
	SpikeGroupBurst      int
	// DedupHorizon is how long a published spike window is remembered. A
	// window that starts before now − DedupHorizon is stale and not
	// alerted (a detector backfill must not page anyone). Default 24h.
	DedupHorizon time.Duration
	// MaterialChange is the relative change of hosts_affected or of the
	// recurrence interval, against the last published value, that makes a
	// "changed" pattern alert. Default 0.2 (±20%).
	MaterialChange float64
	// ResolveAfter is how long a published pattern must be missing from
	// the passes before it is "resolved". Default 0: the first pass without
	// it. Set it above the detector interval when patterns flicker at the
	// edge of their thresholds.
	ResolveAfter time.Duration
	// PatternChangeEvery spaces the "changed" alerts of one pattern: at
	// most one per PatternChangeEvery after its last alert. A change
	// inside it waits; it is measured against the last published facts,
	// so it goes out at the first pass after the interval if it still
	// holds, and not at all if it reverted. A pattern's hosts_affected
	// grows pass after pass while the detector first sees it, which would
	// otherwise send a change every pass. New and resolved alerts are not
	// spaced. Default 15m.
	PatternChangeEvery time.Duration
	// MaxPendingWindows bounds the windows held back per service; beyond
	// it the oldest are dropped and counted (reason "overflow"). Default 10,000.
	MaxPendingWindows int
	// MaxOutbox bounds the alerts kept for a sink that keeps failing;
	// beyond it the oldest are dropped and counted. Default 1,000.
	MaxOutbox int
	// MaxHosts and MaxSuspects bound the host and suspect lists of a
	// spike-group alert. Defaults 20 and 5.
	MaxHosts    int
	MaxSuspects int
	// Clock is the time Publish decides at. Default the system clock;
	// tests inject their own.
	Clock Clock
}

// Clock tells the time.
type Clock interface{ Now() time.Time }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Defaults.
const (
	DefaultSpikeGroupsPerMinute = 2
	DefaultSpikeGroupBurst      = 3
	DefaultDedupHorizon         = 24 * time.Hour
	DefaultMaterialChange       = 0.2
	DefaultPatternChangeEvery   = 15 * time.Minute
	DefaultMaxPendingWindows    = 10_000
	DefaultMaxOutbox            = 1_000
	DefaultMaxHosts             = 20
	DefaultMaxSuspects          = 5
)

// WithDefaults returns c with its zero fields set to their defaults; c
// itself is not changed.
func (c Config) WithDefaults() Config {
	defaults.Fill(&c.SpikeGroupsPerMinute, DefaultSpikeGroupsPerMinute)
	defaults.Fill(&c.SpikeGroupBurst, DefaultSpikeGroupBurst)
	defaults.Fill(&c.DedupHorizon, DefaultDedupHorizon)
	defaults.Fill(&c.MaterialChange, DefaultMaterialChange)
	defaults.Fill(&c.PatternChangeEvery, DefaultPatternChangeEvery)
	defaults.Fill(&c.MaxPendingWindows, DefaultMaxPendingWindows)
	defaults.Fill(&c.MaxOutbox, DefaultMaxOutbox)
	defaults.Fill(&c.MaxHosts, DefaultMaxHosts)
	defaults.Fill(&c.MaxSuspects, DefaultMaxSuspects)
	defaults.Fill[Clock](&c.Clock, systemClock{})
	return c
}

// Validate checks c as NewPublisher would run it, its zero fields taken
// as their defaults. It does not change c.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var bad []string
	check := func(ok bool, format string, a ...any) {
		if !ok {
			bad = append(bad, fmt.Sprintf(format, a...))
		}
	}
	check(c.SpikeGroupsPerMinute > 0 && c.SpikeGroupsPerMinute <= 600, "SpikeGroupsPerMinute %g, want (0, 600]", c.SpikeGroupsPerMinute)
	check(c.SpikeGroupBurst >= 1 && c.SpikeGroupBurst <= 1000, "SpikeGroupBurst %d, want 1–1000", c.SpikeGroupBurst)
	check(c.DedupHorizon >= time.Minute, "DedupHorizon %s, want ≥ 1m", c.DedupHorizon)
	check(c.MaterialChange > 0 && c.MaterialChange < 10, "MaterialChange %g, want (0, 10)", c.MaterialChange)
	check(c.ResolveAfter >= 0, "ResolveAfter %s is negative", c.ResolveAfter)
	check(c.PatternChangeEvery > 0, "PatternChangeEvery %s is negative", c.PatternChangeEvery)
	check(c.MaxPendingWindows >= 1, "MaxPendingWindows %d, want ≥ 1", c.MaxPendingWindows)
	check(c.MaxOutbox >= 1, "MaxOutbox %d, want ≥ 1", c.MaxOutbox)
	check(c.MaxHosts >= 1 && c.MaxHosts <= 10_000, "MaxHosts %d, want 1–10000", c.MaxHosts)
	check(c.MaxSuspects >= 1 && c.MaxSuspects <= 100, "MaxSuspects %d, want 1–100", c.MaxSuspects)
	if len(bad) > 0 {
		return errors.New("alerts: config: " + strings.Join(bad, "; "))
	}
	return nil
}
