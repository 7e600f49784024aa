package detect

import (
	"errors"
	"fmt"
	"time"

	"github.com/spikehunt/spikehunt/internal/defaults"
)

// DetectorVersion is written into every row the detectors produce
// (spikes, spike_suspects, patterns). Bump it when a change to the rules
// or the defaults makes old rows incomparable with new ones.
const DetectorVersion = "detect/8"

// Config is one detection pass: which service, which time range, and the
// knobs of the three stages. The zero value of every knob means its
// default; WithDefaults fills them in (Pass does).
type Config struct {
	// Service is the service to examine; "" means every service with data
	// in latency_1s over the pattern look-back ending at To.
	Service string
	// Spike windows whose start lies in [From, To) are recomputed (and
	// rewritten or retracted). Both are truncated to whole seconds, the
	// grain of latency_1s. Data at or after To is never read: a pass "as of"
	// To sees what a live pass at To would have seen.
	From, To time.Time

	Spikes    SpikeConfig
	Endpoints EndpointConfig
	Suspects  SuspectConfig
	Patterns  PatternConfig

	// MaxSpan bounds the range of one pass of Run: a longer one (the first
	// pass's --since, the gap an outage of the store left) runs as passes
	// of at most MaxSpan each, oldest first, so no statement reads more
	// than MaxSpan plus the pad of the fleet's seconds however long the
	// gap. Pass itself covers [From, To) whatever its length. Default 1 h;
	// 1 min–24 h, a whole number of seconds.
	MaxSpan time.Duration

	// Now stamps detected_at, the version of every row written. It must not
	// go backwards between passes over the same rows: a retraction only wins
	// over a row with an older stamp. Default time.Now; stamps are also made
	// strictly increasing within the process.
	Now func() time.Time
}

// SpikeConfig is the per-host spike window detector (docs/design.md §5).
//
// A host-second is slow when its weighted mean latency exceeds
//
//	max(Floor, max(K, e^(Z × spread)) × base), base = max(fleet's, host's typical latency) in its bucket,
//
// where a bucket is a Bucket-long slice of time aligned to the epoch (see
// spikeWindowsSQL for what "typical" is and why the mean), or when a tenth
// of its requests do. A second slow by its mean on one or two kept
// requests needs company or a request beyond the host's tail (the
// lone-request rule, spikeWindowsSQL). Slow seconds at most MergeGap apart
// merge into one window. Zero fields take the defaults, so MergeGap cannot
// be set to 0.
type SpikeConfig struct {
	// K multiplies the base. Default 8: a second whose requests took eight
	// times the typical ones. 1–1000.
	K float64
	// Z widens K for a service whose seconds vary widely by nature: the
	// multiplier is at least e^(Z × spread), spread the fleet's typical
	// standard deviation of log per-second mean latency in the bucket.
	// Default 2.9: a lognormal body with σ = 0.5 sampled as the agent
	// samples (spread ≈ 0.71) keeps K = 8; σ = 0.9 (p99 8× the median,
	// spread ≈ 1.16) gets ≈ 29×, above its quiet seconds' ~25× peaks
	// that K = 8 took for spikes. 0–10.
	Z float64
	// Floor is the least latency that can be a spike, whatever the base: a
	// service answering in 200 µs does not spike at 2 ms. Default 25 ms.
	Floor time.Duration
	// Bucket is the time slice the typical latency is taken over. Long
	// enough that a 30 s fleet-wide stall is a few percent of it; short
	// enough that a slow creep carries the base along with it.
	// Default 10 min; 1 min–2 h, a whole number of seconds.
	Bucket time.Duration
	// MergeGap: slow seconds separated by at most this many fast seconds
	// are one window. Default 5 s; up to 10 min.
	MergeGap time.Duration
	// FalsePerHostHour is how many false windows per host-hour a host's
	// own latency body may give, the only setting of the company and share
	// bars taken from its tail (spikeWindowsSQL). Default 0.01; 1e-6–1.
	FalsePerHostHour float64
	// Pad is read before From so that a window straddling From is seen
	// whole. Windows that start in the pad are rewritten, not duplicated;
	// windows starting in its first MergeGap + 1 s are left alone, since the
	// pass cannot tell whether they began earlier. It must exceed the
	// longest window plus MergeGap. Default 15 min (a stall of a large part
	// of a bucket raises the host's own typical latency and ends its window).
	Pad time.Duration
}

// EndpointConfig is the per-endpoint spike detector (endpoints.go): the
// stalls of one endpoint's dependency, which the host's per-second figures
// dilute with its other endpoints' requests. It shares K, Floor, Bucket
// and MergeGap with SpikeConfig.
type EndpointConfig struct {
	// Off leaves the stage out: spike windows come from the host's
	// per-second figures only.
	Off bool
	// MaxEndpoints is how many endpoints of a service a pass judges, those
	// with the most requests; the others are counted as dropped
	// (Result.EndpointsDropped), so an app that puts ids into its routes
	// costs a count per route. Default 100; 1–10,000.
	MaxEndpoints int
	// PairZ: two or more slow requests that finished together are a stall
	// past max(K, e^(PairZ × σ)) × base, σ the endpoint's spread of log
	// latency over the fleet. Default 4: a lognormal body with σ = 0.5
	// keeps K = 8; σ = 0.9 gets 36×. 0–10.
	PairZ float64
	// LoneZ and LoneK: a lone slow request is a stall only past
	// max(LoneK, e^(LoneZ × σ)) × base (and the pair bar): a lognormal body
	// yields such a request once in 10⁹ at the default LoneZ 6, and LoneK
	// (default 32) keeps a body with a fatter tail than its bulk's σ says
	// (GC pauses, cache misses) from being taken for stalls. LoneZ 0–10,
	// LoneK 1–1000.
	LoneZ float64
	LoneK float64
	// Together: slow requests whose ends are at most this far apart
	// finished together (a stall releases its requests at once; each then
	// takes its own few milliseconds). Default 100 ms; 1 ms–1 s.
	Together time.Duration
	// MinHostRequests: the host's own typical latency of an endpoint counts
	// (beside the fleet's) from this many requests in the bucket. Default
	// 300.
	MinHostRequests int
}

// SuspectConfig ranks the kernel counters of a spike's host.
type SuspectConfig struct {
	// Margin widens the window on both sides: the counter intervals
	// overlapping [start − Margin, end + Margin] make the "during" rate.
	// Default 1 s.
	Margin time.Duration
	// Baseline is how far before the window the series' normal behaviour is
	// taken from, and Guard the gap left before the window: the baseline is
	// the intervals inside [start − Baseline, start − Guard], minus those
	// touching other spike windows of the host. Defaults 30 min and 30 s.
	Baseline, Guard time.Duration
	// MinBaselineIntervals: a series with fewer baseline intervals (an
	// agent that just started, a NIC that just appeared) is not judged,
	// but for a workload cgroup's, judged against what it reported, or
	// zero (suspects_leaves.go).
	// Default 5.
	MinBaselineIntervals int
	// MinDeviation is the significance bar: a series whose robust deviation
	// (during − median) / scale is below it is not a suspect. Default 6.
	MinDeviation float64
	// MinShareRise: a series in seconds per second (CPU time, run delay,
	// PSI stall time, a cgroup's CPU, throttled and stall time) is a
	// suspect only if it rose by at least this share of a CPU, or of the
	// time, over its baseline: a rise of a tenth of a CPU does not stall a
	// request for a second, however quiet the series was. When the
	// counter's interval (L) is longer than the window (W), the bar is
	// scaled by W/L, as far as the interval dilutes what happened in the
	// window. Default 0.25.
	MinShareRise float64
	// MinCountRatio: a count (packets, interrupts, softirqs raised,
	// operations: the load or its echo, weighing 1) with a baseline above
	// zero is a suspect only if it reached this many times its baseline:
	// after a stall, the requests that waited arrive at once, and their
	// packets' 40 % rise is far outside a quiet series' noise without
	// being a cause. Scaled by W/L as MinShareRise is. The direct evidence
	// of a cause (reclaim, listen drops) and traffic on a down interface
	// are exempt. Default 2.
	MinCountRatio float64
	// RelativeFloor: the scale is at least this share of the series' own
	// median, so that a series that never varies does not turn a 1% move
	// into a suspect. Default 0.05.
	RelativeFloor float64
	// TimeWeight multiplies the deviation of time-valued series (CPU time,
	// run delay, PSI stall, a disk's latency per IO) for the rank: they are the time a
	// spike took from the workload, where counts (packets, drops,
	// interrupts) are its load or echo. Default 100.
	TimeWeight float64
	// DownInterfaceWeight multiplies the deviation of packets received on an
	// interface whose operstate is not up (the down interface (docs/field-stories.md)): traffic that should
	// not exist ranks above the softirq time it causes, so it must exceed
	// TimeWeight. Default 10 000.
	DownInterfaceWeight float64
	// Max is how many suspects a window keeps, most deviating first.
	// Default 10; 1–255.
	Max int
	// Settle: windows that ended less than this before From have their
	// suspects recomputed even when the window itself did not change,
	// because counters may arrive later than latency. Default 2 min.
	Settle time.Duration
	// ChunkBytes and ChunkWindows bound one suspects query; a pass over a
	// long range runs several. A query holds, per window and counter
	// series, the baseline's rates: the chunk takes as many windows as fit
	// in ChunkBytes at the counter rows per second its hosts have now
	// (290 kB a window for 100 series at 10 s over a 30-minute baseline:
	// about 900 windows in the default 256 MiB), at most ChunkWindows
	// (default 20,000). Each query costs ~0.1 s of planning, so a large
	// backfill wants large chunks.
	ChunkBytes   int64
	ChunkWindows int
}

// PatternConfig is the fleet classifier (Classify): see its doc for the rules.
type PatternConfig struct {
	// Lookback is the span of spike windows, ending at To, a pass
	// classifies. Default 6 h; 10 min–30 days.
	Lookback time.Duration
	// Skip leaves the patterns out of the pass (Result.PatternsSkipped):
	// Run sets it on each pass of a catch-up but the last, whose patterns
	// over the look-back stand for them all.
	Skip bool
	// Occurrence: one host's windows starting within this of the previous
	// one are one occurrence of a spike (a stall with a ragged tail yields
	// two windows, not a 3-second "interval"). Default 60 s.
	Occurrence time.Duration

	// BurstSpan is the width of a synchronized burst: spikes of many hosts
	// within ±BurstSpan/2 of one another. Default 2 min.
	BurstSpan time.Duration
	// BurstMinHosts and BurstHostShare: a burst needs at least
	// max(BurstMinHosts, BurstHostShare × hosts with spikes) distinct
	// hosts, and more than chance gives at the fleet's spike rate
	// (Poisson, at BurstAlpha over all the look-back's burst spans).
	// Defaults 5, 0.2, 0.001.
	BurstMinHosts  int
	BurstHostShare float64
	BurstAlpha     float64
	// MinSynchronicity: the share of spikes in bursts that makes a pattern
	// fleet-synchronized. Default 0.5.
	MinSynchronicity float64

	// RecurrentMinHosts and RecurrentHostShare: fleet-recurrent needs at
	// least max(RecurrentMinHosts, RecurrentHostShare × fleet) hosts with
	// two occurrences or more. Defaults 5, 0.1.
	RecurrentMinHosts  int
	RecurrentHostShare float64
	// MaxDispersion: intervals are regular when (p75 − p25) / p50 of the
	// pooled per-host intervals of a hardware class is at most this, or
	// 2.5 × that of the intervals with missed occurrences read in (an
	// interval of two or three periods as that many) is.
	// Periodic 15–20 min gives ~0.15, exponential (Poisson) gaps ~1.6, and
	// the Poisson intervals that fit in a look-back ~1–1.25, but a noisy
	// fleet of 30 hosts reaches 0.8 in about 2% of look-backs. Default 0.5.
	MaxDispersion float64
	// MinIntervals: a hardware class is judged for regularity only with at
	// least this many intervals. Default 30.
	MinIntervals int

	// IsolatedMaxHosts and IsolatedHostShare: isolated-host is at most
	// max(IsolatedMaxHosts, IsolatedHostShare × fleet) outlier hosts.
	// Defaults 3, 0.02.
	IsolatedMaxHosts  int
	IsolatedHostShare float64
	// IsolatedAlpha: a host is an outlier when its count is this unlikely
	// under a Poisson at the mean count of the other hosts,
	// Bonferroni-corrected over the fleet. Default 0.0001: every pass
	// re-tests every host, so a looser bar flickers on noise.
	IsolatedAlpha float64
	// IsolatedMinShare: the outliers must carry at least this share of the
	// spikes beyond the fleet's typical count. Default 0.5.
	IsolatedMinShare float64

	// SkewMinRatio: hw-class-skewed when the highest per-host spike rate of
	// a class is at least this multiple of the lowest one (among classes
	// of at least SkewMinHosts hosts), and the difference is significant:
	// SkewMinZ standard errors of the split of the two classes' spikes by
	// their host counts (binomial, widened by the per-host counts'
	// overdispersion), or of the difference between the per-host counts
	// of the hosts carrying the pattern (Welch). Defaults 1.5, 5, 3.
	SkewMinRatio float64
	SkewMinHosts int
	SkewMinZ     float64

	// SuspectTopRank: a spike's suspects ranked up to this count for the
	// pattern's suspects. SuspectMinShare: a counter family is a pattern
	// suspect when it is among those of at least this share of the
	// pattern's affected hosts and of its spike windows. Defaults 5, 0.2.
	SuspectTopRank  int
	SuspectMinShare float64
	// MaxSuspects is how many counter families a pattern keeps. Default 5.
	MaxSuspects int
}

// Defaults; exported so the CLI documents the same values.
const (
	DefaultK        = 8.0
	DefaultZ        = 2.9
	DefaultFloor    = 25 * time.Millisecond
	DefaultBucket   = 10 * time.Minute
	DefaultMergeGap = 5 * time.Second
	DefaultPad      = 15 * time.Minute
	DefaultMaxSpan  = time.Hour

	DefaultFalsePerHostHour = 0.01

	DefaultMaxEndpoints = 100

	DefaultMinDeviation = 6.0
	DefaultMaxSuspects  = 10

	DefaultLookback = 6 * time.Hour
)

// ErrConfig marks an invalid Config: every error of Validate is a
// *ConfigError, and errors.Is(err, ErrConfig) holds for it.
var ErrConfig = errors.New("detect: invalid config")

// ConfigError is what is wrong with a Config, for a caller that shows the
// problem in its own words (the CLI names flags, not fields).
type ConfigError struct {
	// Problem says which field is wrong and what it wants, without the
	// "detect: invalid config" prefix.
	Problem string
}

func (e *ConfigError) Error() string { return ErrConfig.Error() + ": " + e.Problem }

// Unwrap makes errors.Is(err, ErrConfig) hold.
func (e *ConfigError) Unwrap() error { return ErrConfig }

func configErr(format string, a ...any) error {
	return &ConfigError{Problem: fmt.Sprintf(format, a...)}
}

// WithDefaults returns c with its zero knobs set to their defaults, Now
// defaulted to time.Now, and From and To in UTC truncated to whole seconds;
// c itself is not changed.
func (c Config) WithDefaults() Config {
	if c.Now == nil {
		c.Now = time.Now
	}
	c.From, c.To = c.From.UTC().Truncate(time.Second), c.To.UTC().Truncate(time.Second)
	c.Spikes = c.Spikes.withDefaults()
	c.Endpoints = c.Endpoints.withDefaults()
	c.Suspects = c.Suspects.withDefaults()
	c.Patterns = c.Patterns.withDefaults()
	defaults.Fill(&c.MaxSpan, DefaultMaxSpan)
	return c
}

// Validate checks c as Pass would run it, its zero knobs taken as their
// defaults. It does not change c. Every error it returns is a
// *ConfigError (errors.Is ErrConfig).
func (c Config) Validate() error {
	if c.To.IsZero() {
		return configErr("To is not set: the pass must know where its range ends")
	}
	c = c.WithDefaults()
	if !c.From.Before(c.To) {
		return configErr("From %s is not before To %s", c.From.Format(time.RFC3339), c.To.Format(time.RFC3339))
	}
	if c.MaxSpan < time.Minute || c.MaxSpan > 24*time.Hour || c.MaxSpan%time.Second != 0 {
		return configErr("MaxSpan = %v, want 1m–24h in whole seconds", c.MaxSpan)
	}
	if err := c.Spikes.validate(); err != nil {
		return err
	}
	if err := c.Endpoints.validate(); err != nil {
		return err
	}
	if err := c.Suspects.validate(); err != nil {
		return err
	}
	return c.Patterns.validate()
}

func (c SpikeConfig) withDefaults() SpikeConfig {
	defaults.Fill(&c.K, DefaultK)
	defaults.Fill(&c.Z, DefaultZ)
	defaults.Fill(&c.Floor, DefaultFloor)
	defaults.Fill(&c.Bucket, DefaultBucket)
	defaults.Fill(&c.MergeGap, DefaultMergeGap)
	defaults.Fill(&c.Pad, DefaultPad)
	defaults.Fill(&c.FalsePerHostHour, DefaultFalsePerHostHour)
	return c
}

// validate checks c, its defaults filled in.
func (c SpikeConfig) validate() error {
	switch {
	case c.K < 1 || c.K > 1000:
		return configErr("spikes: K = %g, want 1–1000", c.K)
	case c.Z < 0 || c.Z > 10:
		return configErr("spikes: Z = %g, want 0–10", c.Z)
	case c.Floor < time.Millisecond || c.Floor > time.Hour:
		return configErr("spikes: Floor = %v, want 1ms–1h", c.Floor)
	case c.Bucket < time.Minute || c.Bucket > 2*time.Hour || c.Bucket%time.Second != 0:
		return configErr("spikes: Bucket = %v, want 1m–2h in whole seconds", c.Bucket)
	case c.MergeGap < 0 || c.MergeGap > 10*time.Minute || c.MergeGap%time.Second != 0:
		return configErr("spikes: MergeGap = %v, want 0–10m in whole seconds", c.MergeGap)
	case c.FalsePerHostHour < 1e-6 || c.FalsePerHostHour > 1:
		return configErr("spikes: FalsePerHostHour = %g, want 1e-6–1", c.FalsePerHostHour)
	case c.Pad%time.Second != 0 || c.Pad <= c.MergeGap+time.Second || c.Pad > 24*time.Hour:
		return configErr("spikes: Pad = %v, want more than MergeGap + 1s (%v), at most 24h, in whole seconds", c.Pad, c.MergeGap+time.Second)
	}
	return nil
}

func (c EndpointConfig) withDefaults() EndpointConfig {
	defaults.Fill(&c.MaxEndpoints, DefaultMaxEndpoints)
	defaults.Fill(&c.PairZ, 4)
	defaults.Fill(&c.LoneZ, 6)
	defaults.Fill(&c.LoneK, 32)
	defaults.Fill(&c.Together, 100*time.Millisecond)
	defaults.Fill(&c.MinHostRequests, 300)
	return c
}

// validate checks c, its defaults filled in.
func (c EndpointConfig) validate() error {
	switch {
	case c.MaxEndpoints < 1 || c.MaxEndpoints > 10_000:
		return configErr("endpoints: MaxEndpoints = %d, want 1–10000", c.MaxEndpoints)
	case c.PairZ < 0 || c.PairZ > 10 || c.LoneZ < 0 || c.LoneZ > 10:
		return configErr("endpoints: PairZ = %g, LoneZ = %g, want 0–10", c.PairZ, c.LoneZ)
	case c.LoneK < 1 || c.LoneK > 1000:
		return configErr("endpoints: LoneK = %g, want 1–1000", c.LoneK)
	case c.Together < time.Millisecond || c.Together > time.Second:
		return configErr("endpoints: Together = %v, want 1ms–1s", c.Together)
	case c.MinHostRequests < 1:
		return configErr("endpoints: MinHostRequests = %d, want at least 1", c.MinHostRequests)
	}
	return nil
}

func (c SuspectConfig) withDefaults() SuspectConfig {
	defaults.Fill(&c.Margin, time.Second)
	defaults.Fill(&c.Baseline, 30*time.Minute)
	defaults.Fill(&c.Guard, 30*time.Second)
	defaults.Fill(&c.MinBaselineIntervals, 5)
	defaults.Fill(&c.MinDeviation, DefaultMinDeviation)
	defaults.Fill(&c.RelativeFloor, 0.05)
	defaults.Fill(&c.MinShareRise, 0.25)
	defaults.Fill(&c.MinCountRatio, 2)
	defaults.Fill(&c.TimeWeight, 100)
	defaults.Fill(&c.DownInterfaceWeight, 10_000)
	defaults.Fill(&c.Max, DefaultMaxSuspects)
	defaults.Fill(&c.Settle, 2*time.Minute)
	defaults.Fill(&c.ChunkBytes, 256<<20)
	defaults.Fill(&c.ChunkWindows, 20_000)
	return c
}

// validate checks c, its defaults filled in.
func (c SuspectConfig) validate() error {
	switch {
	case c.Margin < 0 || c.Margin > time.Minute:
		return configErr("suspects: Margin = %v, want 0–1m", c.Margin)
	case c.Guard < 0 || c.Baseline <= c.Guard || c.Baseline > 24*time.Hour:
		return configErr("suspects: Baseline = %v, Guard = %v: want 0 ≤ Guard < Baseline ≤ 24h", c.Baseline, c.Guard)
	case c.MinBaselineIntervals < 1:
		return configErr("suspects: MinBaselineIntervals = %d, want at least 1", c.MinBaselineIntervals)
	case c.MinDeviation <= 0:
		return configErr("suspects: MinDeviation = %g, want more than 0", c.MinDeviation)
	case c.MinCountRatio < 1:
		return configErr("suspects: MinCountRatio = %g, want at least 1", c.MinCountRatio)
	case c.MinShareRise < 0 || c.MinShareRise > 1:
		return configErr("suspects: MinShareRise = %g, want 0–1", c.MinShareRise)
	case c.RelativeFloor < 0 || c.RelativeFloor > 1:
		return configErr("suspects: RelativeFloor = %g, want 0–1", c.RelativeFloor)
	case c.TimeWeight < 1 || c.DownInterfaceWeight < 1:
		return configErr("suspects: TimeWeight = %g, DownInterfaceWeight = %g: want at least 1", c.TimeWeight, c.DownInterfaceWeight)
	case c.Max < 1 || c.Max > 255:
		return configErr("suspects: Max = %d, want 1–255 (rank is a UInt8)", c.Max)
	case c.Settle < 0:
		return configErr("suspects: Settle = %v, want 0 or more", c.Settle)
	case c.ChunkWindows < 1 || c.ChunkBytes < 1<<20:
		return configErr("suspects: ChunkWindows = %d, ChunkBytes = %d: want at least 1 window and 1 MiB", c.ChunkWindows, c.ChunkBytes)
	}
	return nil
}

func (c PatternConfig) withDefaults() PatternConfig {
	defaults.Fill(&c.Lookback, DefaultLookback)
	defaults.Fill(&c.Occurrence, time.Minute)
	defaults.Fill(&c.BurstSpan, 2*time.Minute)
	defaults.Fill(&c.BurstMinHosts, 5)
	defaults.Fill(&c.BurstHostShare, 0.2)
	defaults.Fill(&c.BurstAlpha, 0.001)
	defaults.Fill(&c.MinSynchronicity, 0.5)
	defaults.Fill(&c.RecurrentMinHosts, 5)
	defaults.Fill(&c.RecurrentHostShare, 0.1)
	defaults.Fill(&c.MaxDispersion, 0.5)
	defaults.Fill(&c.MinIntervals, 30)
	defaults.Fill(&c.IsolatedMaxHosts, 3)
	defaults.Fill(&c.IsolatedHostShare, 0.02)
	defaults.Fill(&c.IsolatedAlpha, 0.0001)
	defaults.Fill(&c.IsolatedMinShare, 0.5)
	defaults.Fill(&c.SkewMinRatio, 1.5)
	defaults.Fill(&c.SkewMinHosts, 5)
	defaults.Fill(&c.SkewMinZ, 3)
	defaults.Fill(&c.SuspectTopRank, 5)
	defaults.Fill(&c.SuspectMinShare, 0.2)
	defaults.Fill(&c.MaxSuspects, 5)
	return c
}

// validate checks c, its defaults filled in.
func (c PatternConfig) validate() error {
	switch {
	case c.Lookback < 10*time.Minute || c.Lookback > 30*24*time.Hour:
		return configErr("patterns: Lookback = %v, want 10m–720h", c.Lookback)
	case c.Occurrence < 0 || c.BurstSpan <= 0:
		return configErr("patterns: Occurrence = %v, BurstSpan = %v: want Occurrence ≥ 0, BurstSpan > 0", c.Occurrence, c.BurstSpan)
	case !share(c.BurstHostShare) || !share(c.MinSynchronicity) || !share(c.RecurrentHostShare) ||
		!share(c.IsolatedHostShare) || !share(c.IsolatedMinShare) || !share(c.SuspectMinShare):
		return configErr("patterns: every share must be within 0–1")
	case c.BurstAlpha <= 0 || c.BurstAlpha >= 1 || c.IsolatedAlpha <= 0 || c.IsolatedAlpha >= 1:
		return configErr("patterns: BurstAlpha = %g, IsolatedAlpha = %g: want within (0, 1)", c.BurstAlpha, c.IsolatedAlpha)
	case c.BurstMinHosts < 2 || c.RecurrentMinHosts < 1 || c.IsolatedMaxHosts < 1 || c.SkewMinHosts < 1:
		return configErr("patterns: BurstMinHosts ≥ 2, RecurrentMinHosts, IsolatedMaxHosts and SkewMinHosts ≥ 1")
	case c.MaxDispersion <= 0 || c.MinIntervals < 2:
		return configErr("patterns: MaxDispersion = %g, MinIntervals = %d: want > 0 and ≥ 2", c.MaxDispersion, c.MinIntervals)
	case c.SkewMinRatio <= 1 || c.SkewMinZ < 0:
		return configErr("patterns: SkewMinRatio = %g (want > 1), SkewMinZ = %g (want ≥ 0)", c.SkewMinRatio, c.SkewMinZ)
	case c.SuspectTopRank < 1 || c.MaxSuspects < 1:
		return configErr("patterns: SuspectTopRank and MaxSuspects must be at least 1")
	}
	return nil
}

func share(x float64) bool { return x >= 0 && x <= 1 }
