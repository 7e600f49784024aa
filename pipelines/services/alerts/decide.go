package alerts

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/spikehunt/spikehunt/internal/alertdoc"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
)

// Pass is what one detector pass found.
type Pass struct {
	// NewSpikes are the spike windows this pass found (a window the
	// detector reports again is recognized by its ID and not re-sent).
	NewSpikes []detect.SpikeWindow
	// Patterns are the current patterns of the services the pass evaluated.
	Patterns []detect.Pattern
	// Services lists the services the pass evaluated: a published pattern
	// of one of them that is missing from Patterns has resolved. Empty
	// means every service, so that a pass over a subset must say so.
	Services []string
	// PatternsSkipped: the pass did not look for patterns (a catch-up's
	// pass before its last), so its empty Patterns neither change nor
	// resolve any.
	PatternsSkipped bool
}

// Reasons a spike window or an alert was not published
// (spikehunt_alerts_suppressed_total{reason}).
const (
	// ReasonRateLimited counts spike-group alerts held back by the rate
	// limit (their windows go out with the service's next alert), and
	// passes that held back a pattern's change (Config.PatternChangeEvery).
	ReasonRateLimited = "rate_limited"
	// ReasonDuplicate counts spike windows already published or pending.
	ReasonDuplicate = "duplicate"
	// ReasonStale counts spike windows older than Config.DedupHorizon.
	ReasonStale = "stale"
	// ReasonOverflow counts held-back windows dropped at
	// Config.MaxPendingWindows, and alerts dropped from a full outbox.
	ReasonOverflow = "overflow"
)

// Decision is Decide's result.
type Decision struct {
	Alerts     []alertdoc.Alert // to send, spike groups first, each kind by service
	Next       State            // the state once they are sent
	Suppressed map[string]int   // by reason, see the Reason constants
}

// Decide is the whole alerting policy as a pure function: from the state of
// what was published, a detector pass and the time, it returns the alerts to
// send and the state after them. It neither reads nor changes st.
func Decide(cfg Config, st State, pass Pass, now time.Time) (Decision, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return Decision{}, err
	}
	d := Decision{Next: st.clone(), Suppressed: map[string]int{}}
	d.Alerts = append(decideSpikes(cfg, &d, pass.NewSpikes, now), decidePatterns(cfg, &d, pass, now)...)
	return d, nil
}

func decideSpikes(cfg Config, d *Decision, windows []detect.SpikeWindow, now time.Time) []alertdoc.Alert {
	next := &d.Next
	horizon := now.Add(-cfg.DedupHorizon)
	for id, start := range next.SentSpikes {
		if start.Before(horizon) {
			delete(next.SentSpikes, id)
		}
	}
	pending := map[string]bool{}
	for _, list := range next.Pending {
		for _, w := range list {
			pending[w.ID] = true
		}
	}
	added := map[string]bool{} // services with new windows in this pass
	for _, w := range windows {
		_, sent := next.SentSpikes[w.ID]
		switch {
		case w.Start.Before(horizon):
			d.Suppressed[ReasonStale]++
		case sent || pending[w.ID]:
			d.Suppressed[ReasonDuplicate]++
		default:
			pending[w.ID] = true
			added[w.Service] = true
			next.Pending[w.Service] = append(next.Pending[w.Service], w)
		}
	}

	// Refill every bucket; a full bucket with nothing pending is the same
	// as no bucket, and forgetting it keeps the state small.
	for svc, b := range next.Buckets {
		b = refill(b, cfg, now)
		next.Buckets[svc] = b
		if b.Tokens >= float64(cfg.SpikeGroupBurst) && len(next.Pending[svc]) == 0 {
			delete(next.Buckets, svc)
		}
	}
	var out []alertdoc.Alert
	for _, svc := range slices.Sorted(maps.Keys(next.Pending)) {
		list := next.Pending[svc]
		if len(list) == 0 {
			delete(next.Pending, svc)
			continue
		}
		if over := len(list) - cfg.MaxPendingWindows; over > 0 {
			// Keep the newest: they are what an operator can still catch.
			slices.SortFunc(list, func(a, b detect.SpikeWindow) int { return a.Start.Compare(b.Start) })
			list = list[over:]
			d.Suppressed[ReasonOverflow] += over
		}
		b, ok := next.Buckets[svc]
		if !ok {
			b = Bucket{Tokens: float64(cfg.SpikeGroupBurst), At: now}
		}
		if b.Tokens < 1 {
			next.Pending[svc] = list
			next.Buckets[svc] = b
			// Only a pass that brought windows had an alert to hold back;
			// later passes merely wait for a token.
			if added[svc] {
				next.HeldBack[svc]++
				d.Suppressed[ReasonRateLimited]++
			}
			continue
		}
		b.Tokens--
		next.Buckets[svc] = b
		a := spikeGroupAlert(cfg, svc, list, next.HeldBack[svc], now)
		for _, w := range list {
			next.SentSpikes[w.ID] = w.Start
		}
		delete(next.Pending, svc)
		delete(next.HeldBack, svc)
		out = append(out, a)
	}
	return out
}

// refill adds the tokens earned since b.At, up to the burst. A clock that
// went backwards earns nothing.
func refill(b Bucket, cfg Config, now time.Time) Bucket {
	if now.After(b.At) {
		b.Tokens = math.Min(float64(cfg.SpikeGroupBurst), b.Tokens+now.Sub(b.At).Minutes()*cfg.SpikeGroupsPerMinute)
		b.At = now
	}
	return b
}

func spikeGroupAlert(cfg Config, service string, windows []detect.SpikeWindow, heldBack int, now time.Time) alertdoc.Alert {
	g := &alertdoc.SpikeGroup{Count: len(windows), SuppressedAlerts: heldBack, HWClasses: map[string]int{}}
	perHost := map[string]int{}
	type family struct{ metric, mode, device string }
	type familyTally struct {
		rank1, windows int
		hosts          map[string]bool
		cpus           map[int]int
	}
	families := map[family]*familyTally{}
	var latest detect.SpikeWindow
	for i, w := range windows {
		g.SpikeIDs = append(g.SpikeIDs, w.ID)
		perHost[w.Host]++
		g.HWClasses[w.HWClass]++
		if i == 0 || w.Start.Before(g.FirstWindowStart) {
			g.FirstWindowStart = w.Start
		}
		if w.End.After(g.LastWindowEnd) {
			g.LastWindowEnd = w.End
		}
		if peak := float64(w.PeakUS) / 1000; peak > g.PeakMS || (peak == g.PeakMS && w.Host < g.PeakHost) {
			g.PeakMS, g.PeakHost = peak, w.Host
		}
		if i == 0 || w.DetectedAt.After(latest.DetectedAt) {
			latest = w
		}
		top := -1
		for j, s := range w.Suspects {
			if top < 0 || s.Rank < w.Suspects[top].Rank {
				top = j
			}
		}
		seen := map[family]bool{}
		for j, s := range w.Suspects {
			f := family{s.Metric, s.Mode, s.Device}
			t := families[f]
			if t == nil {
				t = &familyTally{hosts: map[string]bool{}, cpus: map[int]int{}}
				families[f] = t
			}
			if !seen[f] {
				seen[f] = true
				t.windows++
				t.hosts[w.Host] = true
			}
			if j == top {
				t.rank1++
			}
			if s.CPU >= 0 {
				t.cpus[s.CPU]++
			}
		}
	}
	sort.Strings(g.SpikeIDs)
	g.HostsCount = len(perHost)
	g.Hosts = slices.SortedFunc(maps.Keys(perHost), func(a, b string) int {
		return cmp.Or(cmp.Compare(perHost[b], perHost[a]), cmp.Compare(a, b))
	})
	if len(g.Hosts) > cfg.MaxHosts {
		g.Hosts = g.Hosts[:cfg.MaxHosts]
	}
	for f, t := range families {
		cpus := slices.SortedFunc(maps.Keys(t.cpus), func(a, b int) int {
			return cmp.Or(cmp.Compare(t.cpus[b], t.cpus[a]), cmp.Compare(a, b))
		})
		g.TopSuspects = append(g.TopSuspects, alertdoc.GroupSuspect{Metric: f.metric, Mode: f.mode, Device: f.device,
			CPUs: nonNil(cpus), Rank1Windows: t.rank1, Windows: t.windows, Hosts: len(t.hosts)})
	}
	slices.SortFunc(g.TopSuspects, func(a, b alertdoc.GroupSuspect) int {
		return cmp.Or(cmp.Compare(b.Rank1Windows, a.Rank1Windows), cmp.Compare(b.Windows, a.Windows),
			cmp.Compare(a.Metric, b.Metric), cmp.Compare(a.Mode, b.Mode), cmp.Compare(a.Device, b.Device))
	})
	if len(g.TopSuspects) > cfg.MaxSuspects {
		g.TopSuspects = g.TopSuspects[:cfg.MaxSuspects]
	}
	g.TopSuspects = nonNil(g.TopSuspects)
	return alertdoc.Alert{
		Schema: alertdoc.SchemaVersion, AlertID: alertdoc.SpikeGroupID(service, g.SpikeIDs), Kind: alertdoc.KindSpikeGroup,
		Service: service, DetectorVersion: latest.DetectorVer, GeneratedAt: now.UTC(), SpikeGroup: g,
	}
}

func decidePatterns(cfg Config, d *Decision, pass Pass, now time.Time) []alertdoc.Alert {
	if pass.PatternsSkipped {
		return nil
	}
	next := &d.Next
	var out []alertdoc.Alert
	current := slices.Clone(pass.Patterns)
	slices.SortFunc(current, func(a, b detect.Pattern) int {
		return cmp.Or(cmp.Compare(a.Service, b.Service), cmp.Compare(a.ID, b.ID))
	})
	present := map[string]bool{}
	for _, p := range current {
		present[p.ID] = true
		facts := factsOf(p)
		rec := PatternRecord{Service: p.Service, DetectorVersion: p.DetectorVer, Facts: facts}
		prev, published := next.Patterns[p.ID]
		if !published {
			rec.SentAt = now
			next.Patterns[p.ID] = rec
			out = append(out, patternAlert(p.Service, p.DetectorVer, alertdoc.ChangeNew, nil, facts, nil, now))
			continue
		}
		changes := materialChanges(prev.Facts, facts, cfg.MaterialChange)
		if len(changes) == 0 {
			// Unchanged: keep the published facts as the reference, but
			// it is present again.
			prev.MissingSince = time.Time{}
			next.Patterns[p.ID] = prev
			continue
		}
		if !prev.SentAt.IsZero() && now.Sub(prev.SentAt) < cfg.PatternChangeEvery {
			prev.MissingSince = time.Time{}
			next.Patterns[p.ID] = prev
			d.Suppressed[ReasonRateLimited]++
			continue
		}
		rec.SentAt = now
		next.Patterns[p.ID] = rec
		before := prev.Facts
		out = append(out, patternAlert(p.Service, p.DetectorVer, alertdoc.ChangeChanged, changes, facts, &before, now))
	}
	evaluated := map[string]bool{}
	for _, s := range pass.Services {
		evaluated[s] = true
	}
	for _, id := range slices.Sorted(maps.Keys(next.Patterns)) {
		rec := next.Patterns[id]
		if present[id] || (len(evaluated) > 0 && !evaluated[rec.Service]) {
			continue
		}
		if rec.MissingSince.IsZero() {
			rec.MissingSince = now
			next.Patterns[id] = rec
		}
		if now.Sub(rec.MissingSince) < cfg.ResolveAfter {
			continue
		}
		delete(next.Patterns, id)
		last := rec.Facts
		out = append(out, patternAlert(rec.Service, rec.DetectorVersion, alertdoc.ChangeResolved, nil, rec.Facts, &last, now))
	}
	slices.SortStableFunc(out, func(a, b alertdoc.Alert) int { return cmp.Compare(a.Service, b.Service) })
	return out
}

func patternAlert(service, version, change string, changes []string, f alertdoc.PatternFacts, prev *alertdoc.PatternFacts, now time.Time) alertdoc.Alert {
	return alertdoc.Alert{
		Schema: alertdoc.SchemaVersion, AlertID: alertdoc.PatternAlertID(service, change, f), Kind: alertdoc.KindPattern,
		Service: service, DetectorVersion: version, GeneratedAt: now.UTC(),
		Pattern: &alertdoc.PatternChange{Change: change, Changes: nonNil(changes), PatternFacts: f, Previous: prev},
	}
}

// materialChanges lists what moved between the published facts and the
// current ones: the class, the modifiers, or hosts_affected or the
// recurrence interval by at least the threshold (relative).
func materialChanges(prev, cur alertdoc.PatternFacts, threshold float64) []string {
	var c []string
	if prev.Class != cur.Class {
		c = append(c, alertdoc.ChangedClass)
	}
	if !slices.Equal(prev.Modifiers, cur.Modifiers) {
		c = append(c, alertdoc.ChangedModifiers)
	}
	if relChange(float64(prev.HostsAffected), float64(cur.HostsAffected)) >= threshold-1e-9 {
		c = append(c, alertdoc.ChangedHostsAffected)
	}
	if relChange(prev.RecurrenceIntervalS, cur.RecurrenceIntervalS) >= threshold-1e-9 {
		c = append(c, alertdoc.ChangedRecurrenceInterval)
	}
	return c
}

// relChange is |cur − prev| / prev; any change from zero is infinite.
func relChange(prev, cur float64) float64 {
	switch {
	case prev == cur:
		return 0
	case prev == 0:
		return math.Inf(1)
	default:
		return math.Abs(cur-prev) / math.Abs(prev)
	}
}

// factsOf copies a detector pattern into alert facts, with sorted
// modifiers and empty (not null) lists and maps.
func factsOf(p detect.Pattern) alertdoc.PatternFacts {
	f := alertdoc.PatternFacts{
		PatternID: p.ID, Class: p.Class, Modifiers: nonNil(slices.Sorted(slices.Values(p.Modifiers))),
		HostsAffected: p.HostsAffected, HostsTotal: p.HostsTotal,
		RecurrenceIntervalS: p.RecurrenceInterval.Seconds(), Regularity: p.Regularity, Synchronicity: p.Synchronicity,
		HWClassSkew: maps.Clone(p.HWClassSkew), IllusionShare: p.IllusionShare,
		AffectedHostsSample: nonNil(slices.Clone(p.AffectedHostsSample)),
		LookbackStart:       p.LookbackStart.UTC(), LookbackEnd: p.LookbackEnd.UTC(),
		Suspects: []alertdoc.PatternSuspect{},
	}
	if p.HostsTotal > 0 {
		f.HostsAffectedShare = float64(p.HostsAffected) / float64(p.HostsTotal)
	}
	if f.HWClassSkew == nil {
		f.HWClassSkew = map[string]float64{}
	}
	for _, s := range p.Suspects {
		f.Suspects = append(f.Suspects, alertdoc.PatternSuspect{Metric: s.Metric, Mode: s.Mode, Device: s.Device,
			CPUs: nonNil(slices.Clone(s.CPUs)), Hosts: s.Hosts, Score: s.Score})
	}
	return f
}

// nonNil makes a nil slice empty, so that JSON says [] and not null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
