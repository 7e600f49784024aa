package detect

import (
	"context"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
)

// Run runs passes over cfg's range, then one every `every` until ctx
// ends, each from where the last one ended to the current time shifted by
// the offset cfg.To had from the clock at the start (zero for a live run;
// a replay "as of" a past time keeps its distance). onPass sees every
// result (hooks.Pass; hooks.Start sees each pass begin). every = 0 runs the
// range once.
//
// A range longer than cfg.MaxSpan (the first one, over --since; the gap
// a failed pass leaves) is caught up in passes of at most MaxSpan, oldest
// first. Each of them but the last skips the patterns, which the last
// finds over the whole look-back, and says how far behind it is
// (Result.Behind). So a restart or an outage costs statements of a
// bounded size, and the alerts of a catch-up's spike windows go out as
// each of its passes ends rather than after all of them.
//
// A failed pass is returned when every = 0 or ctx ended. With every > 0
// it is reported to hooks.Fail and tried again after every
// (doubling up to 5 minutes while it keeps failing), over the range from
// the last pass that succeeded: a store that is down for an hour leaves a
// one-hour gap, caught up once it answers, not a dead detector.
func Run(ctx context.Context, st store.Store, cfg Config, every time.Duration, hooks RunHooks) error {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg = cfg.WithDefaults()
	offset := cfg.To.Sub(cfg.Now())
	end := cfg.To // the end of the range being caught up to
	wait := every
	for {
		pass := cfg
		if end.Sub(pass.From) > cfg.MaxSpan {
			pass.To = pass.From.Add(cfg.MaxSpan)
			pass.Patterns.Skip = true
		} else {
			pass.To = end
		}
		if hooks.Start != nil {
			hooks.Start(pass.From, pass.To)
		}
		res, err := Pass(ctx, st, pass)
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil && every <= 0:
			return err
		case err != nil:
			if hooks.Fail != nil {
				hooks.Fail(err)
			}
			if !sleep(ctx, wait) {
				return ctx.Err()
			}
			wait = min(2*wait, 5*time.Minute)
			if now := cfg.Now().Add(offset).Truncate(time.Second); now.After(end) {
				end = now
			}
			continue
		}
		wait = every
		res.Behind = end.Sub(res.To)
		if hooks.Pass != nil {
			hooks.Pass(res)
		}
		cfg.From = res.To
		if cfg.From.Before(end) {
			continue // the rest of the catch-up, at once
		}
		if every <= 0 {
			return nil
		}
		for !end.After(cfg.From) {
			if !sleep(ctx, every) {
				return ctx.Err()
			}
			end = cfg.Now().Add(offset).Truncate(time.Second)
		}
	}
}

// RunHooks are what Run tells its caller; each may be nil.
type RunHooks struct {
	Start func(from, to time.Time) // a pass over [from, to) begins
	Pass  func(Result)             // a pass finished
	Fail  func(error)              // a pass failed; it is tried again
}

// sleep waits d or until ctx ends, and says whether ctx is still alive.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
