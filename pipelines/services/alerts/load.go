package alerts

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/spikehunt/spikehunt/internal/alertdoc"
	"github.com/spikehunt/spikehunt/internal/store"
)

// LoadState rebuilds a State from what the detectors wrote, for a process
// that starts without a saved one: the latest version of every pattern
// whose look-back ended within horizon of now counts as published, and
// every spike window that started within it as sent.
//
// What it cannot know is what the previous process decided but never
// delivered: windows and pattern changes the detectors wrote just before a
// crash are then not alerted (a short gap instead of a day of alerts sent
// twice). A State saved after each Publish has no such gap; prefer it.
func LoadState(ctx context.Context, st store.Store, now time.Time, horizon time.Duration) (State, error) {
	s := State{}.clone()
	since := fmt.Sprintf("fromUnixTimestamp64Milli(%d, 'UTC')", now.Add(-horizon).UnixMilli())
	pats, err := store.Select(ctx, st, `SELECT pattern_id, service, class, toJSONString(modifiers) AS modifiers_json,
		lookback_start, lookback_end, hosts_affected, hosts_total, recurrence_interval_s, regularity, synchronicity,
		toJSONString(hw_class_skew) AS skew_json, illusion_share, toJSONString(suspects) AS suspects_json, detector_version
	FROM patterns FINAL
	WHERE is_deleted = 0 AND lookback_end >= `+since+`
	ORDER BY service, pattern_id, lookback_end DESC
	LIMIT 1 BY service, pattern_id`)
	if err != nil {
		return State{}, fmt.Errorf("alerts: load patterns: %w", err)
	}
	for _, r := range pats.Rows {
		var f alertdoc.PatternFacts
		var p parser
		f.PatternID, f.Class = r[0], r[2]
		p.json(r[3], &f.Modifiers)
		f.LookbackStart, f.LookbackEnd = p.time(r[4]), p.time(r[5])
		f.HostsAffected, f.HostsTotal = int(p.float(r[6])), int(p.float(r[7]))
		f.RecurrenceIntervalS, f.Regularity, f.Synchronicity = p.float(r[8]), p.float(r[9]), p.float(r[10])
		p.json(r[11], &f.HWClassSkew)
		f.IllusionShare = p.float(r[12])
		p.json(r[13], &f.Suspects)
		if p.err != nil {
			return State{}, fmt.Errorf("alerts: load pattern %s: %w", r[0], p.err)
		}
		if f.HostsTotal > 0 {
			f.HostsAffectedShare = float64(f.HostsAffected) / float64(f.HostsTotal)
		}
		// The table keeps neither the CPUs of a suspect nor the sample of
		// hosts; neither takes part in change detection.
		for i := range f.Suspects {
			f.Suspects[i].CPUs = []int{}
		}
		slices.Sort(f.Modifiers) // compared as a set, as factsOf leaves them
		f.Modifiers, f.Suspects, f.AffectedHostsSample = nonNil(f.Modifiers), nonNil(f.Suspects), []string{}
		if f.HWClassSkew == nil {
			f.HWClassSkew = map[string]float64{}
		}
		s.Patterns[f.PatternID] = PatternRecord{Service: r[1], DetectorVersion: r[14], Facts: f}
	}
	spikes, err := store.Select(ctx, st, `SELECT spike_id, window_start FROM spikes FINAL
	WHERE is_deleted = 0 AND window_start >= `+since)
	if err != nil {
		return State{}, fmt.Errorf("alerts: load spikes: %w", err)
	}
	for _, r := range spikes.Rows {
		var p parser
		if s.SentSpikes[r[0]] = p.time(r[1]); p.err != nil {
			return State{}, fmt.Errorf("alerts: load spike %s: %w", r[0], p.err)
		}
	}
	return s, nil
}

// parser reads store.Select's text values, keeping the first error.
type parser struct{ err error }

func (p *parser) float(s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil && p.err == nil {
		p.err = err
	}
	return v
}

func (p *parser) time(s string) time.Time {
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil && p.err == nil {
		p.err = err
	}
	return v.UTC()
}

func (p *parser) json(s string, v any) {
	if err := json.Unmarshal([]byte(s), v); err != nil && p.err == nil {
		p.err = err
	}
}
