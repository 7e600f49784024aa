package detect

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
)

// Result is what one pass wrote.
type Result struct {
	From, To time.Time // the pass's range, as validated (whole seconds)
	Services []string  // the services examined
	// Spikes are the windows the pass wrote: those starting in [From, To)
	// and, rewritten, those starting in the pad before From. Suspects are
	// filled in, read back from spike_suspects.
	Spikes []SpikeWindow
	// Retracted are the spike ids of rows in the range the pass no longer
	// produces, now marked is_deleted.
	Retracted []string
	// EndpointsJudged and EndpointsDropped count, over the services, the
	// endpoints the per-endpoint stage judged and those beyond
	// EndpointConfig.MaxEndpoints it left out.
	EndpointsJudged, EndpointsDropped int
	// SuspectRows is how many spike_suspects rows the pass wrote (windows
	// that did not change keep the rows of an earlier pass).
	SuspectRows int
	// Patterns are the patterns found over the look-back ending at To;
	// RetractedPatterns the pattern ids written earlier for the same
	// look-back end that this pass no longer finds.
	Patterns          []Pattern
	RetractedPatterns []string
	// PatternsSkipped: the pass left the patterns out (a catch-up's pass
	// before its last, PatternConfig.Skip). Patterns is empty then, and
	// says nothing of which patterns hold.
	PatternsSkipped bool
	// Behind is how far To lies before the end of the range Run is
	// catching up to: 0 when the pass is a live one or a catch-up's last.
	Behind     time.Duration
	DetectedAt time.Time // the detected_at of every row written
	Timing     Timing
}

// Timing is where a pass spent its time, summed over services.
type Timing struct {
	Spikes, Suspects, Patterns, Total time.Duration
}

// NewSpikes counts the windows that are new or changed in this pass.
func (r Result) NewSpikes() int {
	n := 0
	for _, w := range r.Spikes {
		if w.Changed {
			n++
		}
	}
	return n
}

// Pass runs the three detectors once over cfg's range: spike windows
// (written, stale ones retracted), their suspects, then the patterns of
// the look-back ending at cfg.To. It is idempotent: a second pass over the
// same range and data rewrites the same rows (with a newer detected_at).
// Two passes over one service must not run at once: each retracts what it
// did not write itself.
func Pass(ctx context.Context, st store.Store, cfg Config) (Result, error) {
	began := time.Now()
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	res := Result{From: cfg.From, To: cfg.To, DetectedAt: nextStamp(cfg.Now), PatternsSkipped: cfg.Patterns.Skip}
	if cfg.Service != "" {
		res.Services = []string{cfg.Service}
	} else {
		var err error
		if res.Services, err = Services(ctx, st, cfg.To.Add(-cfg.Patterns.Lookback), cfg.To); err != nil {
			return res, err
		}
	}
	for _, service := range res.Services {
		if err := passService(ctx, st, &cfg, service, &res); err != nil {
			return res, err
		}
	}
	res.Timing.Total = time.Since(began)
	return res, nil
}

func passService(ctx context.Context, st store.Store, cfg *Config, service string, res *Result) error {
	t := time.Now()
	r := newSpikeRange(cfg)
	windows, fleet, err := findSpikeWindows(ctx, st, service, r, cfg.Spikes)
	if err != nil {
		return err
	}
	eps, err := findEndpointWindows(ctx, st, service, r, cfg.Spikes, cfg.Endpoints)
	if err != nil {
		return err
	}
	windows = withEndpointWindows(windows, eps.windows, cfg.Spikes.MergeGap, r.writeFrom)
	res.EndpointsJudged += eps.judged
	res.EndpointsDropped += eps.dropped
	// The rows of the range as stored: a window is new or changed against
	// them, and those the pass no longer produces are retracted.
	stored, err := storedWindows(ctx, st, service, r.writeFrom, r.to)
	if err != nil {
		return err
	}
	for i := range windows {
		w := &windows[i]
		w.DetectedAt, w.DetectorVer = res.DetectedAt, DetectorVersion
		k := windowKey{w.Host, w.Start.UnixMilli()}
		old, ok := stored[k]
		w.Changed = !ok || !old.End.Equal(w.End) || old.PeakUS != w.PeakUS
		delete(stored, k)
	}
	var stale []SpikeWindow
	var retracted []string
	for _, w := range stored {
		stale = append(stale, w)
		retracted = append(retracted, w.ID)
	}
	slices.Sort(retracted)
	if err := writeSpikeWindows(ctx, st, windows, stale, res.DetectedAt); err != nil {
		return err
	}
	res.Timing.Spikes += time.Since(t)

	t = time.Now()
	rows, err := rankSuspects(ctx, st, cfg, service, windows, retracted, res.DetectedAt)
	if err != nil {
		return err
	}
	if err := attachSuspects(ctx, st, service, windows); err != nil {
		return err
	}
	res.Timing.Suspects += time.Since(t)
	res.Spikes = append(res.Spikes, windows...)
	res.Retracted = append(res.Retracted, retracted...)
	res.SuspectRows += rows

	if cfg.Patterns.Skip {
		return nil
	}
	t = time.Now()
	patterns, gone, err := findPatterns(ctx, st, cfg, service, res.DetectedAt, fleet)
	if err != nil {
		return err
	}
	res.Patterns = append(res.Patterns, patterns...)
	res.RetractedPatterns = append(res.RetractedPatterns, gone...)
	res.Timing.Patterns += time.Since(t)
	return nil
}

// Services lists the services with data in latency_1s over [from, to).
func Services(ctx context.Context, st store.Store, from, to time.Time) ([]string, error) {
	q := fmt.Sprintf(`SELECT DISTINCT toString(service) AS service FROM latency_1s WHERE ts >= %s AND ts < %s ORDER BY service`,
		secLit(from), secLit(to))
	var out []string
	err := st.Query(ctx, q, func(b store.Block) error {
		c, err := column[string](b, "service")
		if err != nil {
			return err
		}
		for i := 0; i < b.Rows; i++ {
			out = append(out, c.Row(i))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("detect: list services: %w", err)
	}
	return out, nil
}
