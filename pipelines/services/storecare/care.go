package storecare

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spikehunt/spikehunt/internal/defaults"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/pipelines/services/ingest"
)

// Config configures a Carer.
type Config struct {
	// Dir is the store's data directory; its file system is the volume.
	Dir string
	// Database is the store's database, the one whose tables are looked
	// after.
	Database string
	// Every is the time between rounds. Default 10 s.
	Every time.Duration
	// Settle is how old a detached part's range must be before its rows
	// are rebuilt, so that rows of the range still on their way land
	// first. Default 2 minutes.
	Settle time.Duration
	// Instance is the host column of the rows written into counters.
	Instance string
	// Logger; slog.Default when nil.
	Logger *slog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Defaults for Config.
const (
	DefaultEvery  = 10 * time.Second
	DefaultSettle = 2 * time.Minute
)

// roundTimeout bounds one round: its statements are stopped there (the
// engine's max_execution_time), and the next round goes on.
const roundTimeout = 30 * time.Minute

// maxVerifyPerRound bounds the parts read in one round; the rest wait
// for the next.
const maxVerifyPerRound = 200

// Carer looks after one store's data (see the package comment). Round is
// safe to call from one goroutine at a time; Run calls it on a ticker.
type Carer struct {
	st   store.Store
	cfg  Config
	log  *slog.Logger
	self *ingest.SelfCounters
	m    metrics

	mu          sync.Mutex // guards the fields below against Pending and Status
	repairs     []*repair
	spell       lowSpell
	errValues   map[int]uint64 // system.errors' value per code at the last round
	errBaseline bool           // errValues holds the counts as the first round found them
	queue       map[string]bool
	lastRound   time.Time
	started     bool
}

// New returns a Carer of st, whose data lives in cfg.Dir.
func New(st store.Store, cfg Config) (*Carer, error) {
	if cfg.Dir == "" {
		return nil, errors.New("storecare: no data directory")
	}
	defaults.Fill(&cfg.Database, "default")
	defaults.Fill(&cfg.Every, DefaultEvery)
	defaults.Fill(&cfg.Settle, DefaultSettle)
	if cfg.Every <= 0 || cfg.Settle < 0 {
		return nil, fmt.Errorf("storecare: every %v and settle %v must be positive", cfg.Every, cfg.Settle)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Carer{st: st, cfg: cfg, log: log, self: ingest.NewSelfCounters(st, cfg.Instance), m: newMetrics(),
		errValues: map[int]uint64{}, queue: map[string]bool{}}, nil
}

// Register adds the Carer's figures to reg.
func (c *Carer) Register(reg prometheus.Registerer) error { return c.m.register(reg) }

// Run calls Round every cfg.Every until ctx ends. A round that fails is
// logged and counted; the next one tries again.
func (c *Carer) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Every)
	defer t.Stop()
	failing := false
	var saidAt time.Time
	for {
		rctx, cancel := context.WithTimeout(ctx, roundTimeout)
		err := c.Round(rctx)
		cancel()
		switch {
		case ctx.Err() != nil:
		case err != nil:
			c.m.roundErrors.Inc()
			// A store not migrated yet, or a volume that stays full, fails
			// every round: say so at once, then once in 5 minutes.
			if !failing || time.Since(saidAt) >= 5*time.Minute {
				c.log.Warn("store care: a round failed; the next one tries again", "err", err)
				failing, saidAt = true, time.Now()
			}
		case failing:
			c.log.Info("store care: rounds succeed again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Round runs one round: the volume, the engine's errors, the parts to
// read, the parts to take out and the rebuilds that are due. Its steps'
// errors are joined; a step that fails does not stop the others.
func (c *Carer) Round(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Now().UTC()
	var errs []error
	if !c.started {
		if err := c.start(ctx); err != nil {
			errs = append(errs, err)
		} else {
			c.started = true
		}
	}
	if v, err := readVolume(c.cfg.Dir); err != nil {
		errs = append(errs, err)
	} else {
		c.m.free.Set(float64(v.Free))
		c.m.size.Set(float64(v.Size))
		low := v.Free < lowFree(v.Size)
		if low && !c.spell.low {
			c.log.Warn("store care: the store's volume is low on space; the parts written from now on will be read once it is back",
				"dir", c.cfg.Dir, "free_bytes", v.Free, "size_bytes", v.Size)
		}
		c.spell.saw(low, now)
		c.self.Gauge(metricVolumeFree, "", "", now, float64(v.Free))
		c.self.Gauge(metricVolumeSize, "", "", now, float64(v.Size))
	}
	// The active parts, listed at most once a round and only when an
	// error rose or a part is queued: the steady round reads no parts.
	active := &partList{c: c}
	if err := c.readErrors(ctx, active); err != nil {
		errs = append(errs, err)
	}
	if err := c.sweep(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := c.takeOut(ctx, now, active); err != nil {
		errs = append(errs, err)
	}
	if err := c.rebuildDue(ctx, now); err != nil {
		errs = append(errs, err)
	}
	c.m.pending.Set(float64(c.countState(statePending)))
	if err := c.self.Flush(ctx); err != nil {
		errs = append(errs, err)
	}
	c.lastRound = now
	return errors.Join(errs...)
}

// start loads the journal and adds the parts the engine detached when it
// booted.
func (c *Carer) start(ctx context.Context) error {
	rs, jerr := c.loadJournal()
	if jerr != nil {
		c.log.Error("store care: "+jerr.Error(), "dir", c.cfg.Dir)
	}
	c.repairs = rs
	known := map[string]bool{}
	for _, r := range rs {
		known[r.key()] = true
	}
	more, err := c.brokenOnStart(ctx, known)
	if err != nil {
		return err
	}
	for _, r := range more {
		c.log.Error("store care: the engine took a part it could not load out of its table when it booted",
			"table", r.Table, "part", r.Part, "rows", r.Rows, "from", r.From, "to", r.To)
		c.m.detached.WithLabelValues(r.Table).Inc()
		c.self.Delta(metricPartsDetached, r.Table, "", r.Detached, r.Detached.Add(time.Second), 1)
		if err := c.plan(ctx, r, c.cfg.Now().UTC()); err != nil {
			return err
		}
		c.repairs = append(c.repairs, r)
	}
	if len(more) > 0 {
		return c.saveJournal()
	}
	return nil
}

// readErrors reads system.errors: a code whose count rose queues the
// parts its last message names, and a "no space" error marks the volume
// low at its time, however short the spell was.
func (c *Carer) readErrors(ctx context.Context, active *partList) error {
	es, err := c.engineErrors(ctx)
	if err != nil {
		return err
	}
	if !c.errBaseline {
		// The counts are the engine's, for the life of the process: what
		// they held before the first round happened before this Carer
		// (parts the engine could not load at boot are brokenOnStart's).
		for _, e := range es {
			c.errValues[e.Code] = e.Value
		}
		c.errBaseline = true
		return nil
	}
	for _, e := range es {
		last, seen := c.errValues[e.Code]
		c.errValues[e.Code] = e.Value
		if seen && e.Value <= last {
			continue
		}
		if e.noSpace() {
			c.spell.mark(e.Last)
		}
		if _, ok := corruptCodes[e.Code]; !ok {
			continue
		}
		parts, err := active.get(ctx)
		if err != nil {
			return err
		}
		for _, p := range named(parts, e.Message) {
			c.queue[p.Name+"\x00"+p.Table] = true
		}
	}
	return nil
}

// sweep queues the parts written since the volume ran low, once it is
// no longer low.
func (c *Carer) sweep(ctx context.Context) error {
	since, ok := c.spell.due()
	if !ok {
		return nil
	}
	// A part's time is its folder's, at a second's grain, and a part may
	// have been begun a while before it was committed.
	parts, err := c.activeParts(ctx, since.Add(-time.Minute))
	if err != nil {
		return err
	}
	for i, p := range parts {
		if len(c.queue) >= maxVerifyPerRound {
			c.spell.since = parts[i].Modified.Add(time.Minute) // the rest next round
			return nil
		}
		c.queue[p.Name+"\x00"+p.Table] = true
	}
	c.log.Info("store care: reading the parts written while the volume was low", "since", since, "parts", len(parts))
	c.spell.swept()
	return nil
}

// takeOut reads the queued parts and detaches those whose read fails on
// corruption.
func (c *Carer) takeOut(ctx context.Context, now time.Time, active *partList) error {
	if len(c.queue) == 0 {
		return nil
	}
	parts, err := active.get(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range parts {
		if !c.queue[p.Name+"\x00"+p.Table] {
			continue
		}
		broken, reason, err := c.verify(ctx, p)
		c.m.verified.Inc()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !broken {
			continue
		}
		if err := c.detach(ctx, p); err != nil {
			errs = append(errs, err)
			continue
		}
		r := &repair{Table: p.Table, Part: p.Name, Partition: p.Partition, From: p.MinTime, To: p.MaxTime, Rows: p.Rows, Reason: reason, Detached: now}
		c.m.detached.WithLabelValues(p.Table).Inc()
		c.self.Delta(metricPartsDetached, p.Table, "", now, now.Add(time.Second), 1)
		if err := c.plan(ctx, r, now); err != nil {
			errs = append(errs, err)
		}
		c.repairs = append(c.repairs, r)
		c.log.Error("store care: a part the engine cannot read was taken out of its table; its files are kept in the table's detached/ folder",
			"table", p.Table, "part", p.Name, "rows", p.Rows, "from", p.MinTime, "to", p.MaxTime, "state", r.State, "reason", reason)
		if err := c.saveJournal(); err != nil {
			errs = append(errs, err)
		}
	}
	clear(c.queue)
	return errors.Join(errs...)
}

// plan decides what becomes of a detached part's rows: rebuilt once its
// range settled when a view feeds its table and its range is known, lost
// otherwise.
func (c *Carer) plan(ctx context.Context, r *repair, now time.Time) error {
	f, err := c.feederOf(ctx, r.Table)
	if err != nil {
		r.State, r.Due = statePending, now.Add(c.cfg.Every)
		return err
	}
	if f == nil || r.From.IsZero() {
		r.State = stateLost
		why := "no view feeds its table"
		if f != nil {
			why = "its time range is not known"
		}
		c.lost(r, now, why)
		return nil
	}
	r.State, r.Source = statePending, f.Source
	r.Due = r.To.Add(c.cfg.Settle)
	if r.Due.Before(now) {
		r.Due = now
	}
	return nil
}

// lost counts r's rows as lost, and says why.
func (c *Carer) lost(r *repair, now time.Time, why string) {
	c.m.rowsLost.WithLabelValues(r.Table).Add(float64(r.Rows))
	c.self.Delta(metricRowsLost, r.Table, "", now, now.Add(time.Second), float64(r.Rows))
	c.log.Error("store care: the rows of a part taken out are lost: "+why,
		"table", r.Table, "part", r.Part, "rows", r.Rows, "from", r.From, "to", r.To)
}

// rebuildDue rebuilds the pending repairs whose time has come; one that
// fails is tried again after two rounds, then after a delay that doubles
// up to 10 minutes.
func (c *Carer) rebuildDue(ctx context.Context, now time.Time) error {
	var errs []error
	changed := false
	for _, r := range c.repairs {
		if r.State != statePending || now.Before(r.Due) {
			continue
		}
		changed = true
		f, err := c.feederOf(ctx, r.Table)
		if err == nil && f == nil {
			r.State = stateLost
			c.lost(r, now, "no view feeds its table any more")
			continue
		}
		if err == nil {
			switch c.sourceState(r, f) {
			case statePending:
				// The source's own repair first: this one reads it.
				r.Due = now.Add(c.cfg.Every)
				continue
			case stateLost:
				// Rebuilding would replace the range's rows, which other
				// parts of this table still hold, with what is left of
				// the source: fewer. The part's rows are lost instead.
				r.State = stateLost
				c.lost(r, now, "its source "+f.Source+" lost rows of the range too, so it is not rebuilt")
				continue
			}
		}
		var rows uint64
		if err == nil {
			start := time.Now()
			rows, err = c.rebuild(ctx, r, f)
			c.m.rebuildSeconds.Observe(time.Since(start).Seconds())
		}
		if err != nil {
			r.Tries++
			r.LastError = firstLine(err.Error())
			// Often the source has a broken part too, which the next
			// rounds take out: try again soon, then less and less often.
			r.Due = now.Add(min(c.cfg.Every<<min(r.Tries, 8), 10*time.Minute))
			errs = append(errs, err)
			continue
		}
		r.State, r.LastError = stateRebuilt, ""
		c.m.rebuilt.WithLabelValues(r.Table).Inc()
		c.self.Delta(metricPartsRebuilt, r.Table, "", now, now.Add(time.Second), 1)
		c.log.Warn("store care: the rows of a part taken out were rebuilt from the view's source",
			"table", r.Table, "part", r.Part, "from", r.From, "to", r.To, "source", r.Source, "rows_rebuilt", rows, "rows_detached", r.Rows)
	}
	if changed {
		if err := c.saveJournal(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sourceState says whether the table r's view reads has a repair of its
// own over r's range (a minute wider each way, for views that roll rows
// up to the minute; the whole partition when a range is unknown):
// statePending when one waits, stateLost when one lost rows, "" when
// none.
func (c *Carer) sourceState(r *repair, f *feeder) string {
	source := strings.TrimPrefix(f.Source, c.cfg.Database+".")
	out := ""
	for _, o := range c.repairs {
		if o.Table != source || o == r {
			continue
		}
		overlaps := o.Partition == r.Partition
		if !o.From.IsZero() {
			overlaps = !o.From.After(r.To.Add(time.Minute)) && !o.To.Before(r.From.Add(-time.Minute))
		}
		if !overlaps {
			continue
		}
		switch o.State {
		case statePending:
			return statePending
		case stateLost:
			out = stateLost
		}
	}
	return out
}

func (c *Carer) countState(s string) int {
	n := 0
	for _, r := range c.repairs {
		if r.State == s {
			n++
		}
	}
	return n
}

// Repair is what the Carer did with one part, for tests and Status.
type Repair struct {
	Table, Part, State string
	From, To           time.Time
	Rows               uint64
	LastError          string
}

// Repairs lists the repairs the journal holds, oldest first.
func (c *Carer) Repairs() []Repair {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Repair, 0, len(c.repairs))
	for _, r := range c.repairs {
		out = append(out, Repair{Table: r.Table, Part: r.Part, State: r.State, From: r.From, To: r.To, Rows: r.Rows, LastError: r.LastError})
	}
	return out
}
