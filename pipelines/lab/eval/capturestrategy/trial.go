package capturestrategy

import (
	"cmp"
	"container/heap"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/spikehunt/spikehunt/internal/alertdoc"
	"github.com/spikehunt/spikehunt/internal/policy"
	"github.com/spikehunt/spikehunt/internal/vocab"
	"github.com/spikehunt/spikehunt/pipelines/lab/sim"
	"github.com/spikehunt/spikehunt/pipelines/services/alerts"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
)

// service is the simulated fleet's service and the policy's.
const service = "checkout"

// Trial is what one simulated fleet gave.
type Trial struct {
	Config   Config
	Detected bool
	// DetectedAt is the first detector pass that alerted the pattern;
	// Start is when the fleet, the pattern and the operator began.
	Start, DetectedAt time.Time
	Period            time.Duration
	// Classes are the hardware classes the pattern's stalls were on, each
	// with when it was first covered.
	Classes []ClassCover
	// Armings is every Capture the policy created; Wasted those that ended
	// without covering a stall (expired before one came); Open those still
	// armed and unfired when the trial ended, counted in neither share.
	Armings, Wasted, Open int
	// ByReason splits Armings and Wasted by why they were armed.
	ByReason map[policy.Reason][2]int
	// Alerts is how many pattern alerts the detector sent.
	Alerts int
}

// ClassCover is one hardware class's first indexed capture of a stall.
type ClassCover struct {
	Class string
	// Periods from the detection to the first indexed capture that
	// covered a stall of the pattern on a host of the class: 0 when one
	// was indexed before the detection, +Inf when none was within the
	// horizon.
	Periods float64
	// BeforeDetection: the first cover was indexed before the detection
	// (bait caught it).
	BeforeDetection bool
}

// Worst is the slowest class's Periods: the pattern is covered on every
// class within that many periods.
func (t Trial) Worst() float64 {
	w := 0.0
	for _, c := range t.Classes {
		w = math.Max(w, c.Periods)
	}
	return w
}

// capture is one arming as the simulated agent and operator carry it out.
type capture struct {
	policy.Arming
	class   string
	fireAt  time.Time // zero when no stall came while it could fire
	indexed time.Time
	expired bool
}

// event is something that happens to a capture at a time: it fires, or
// it is indexed (uploaded: no longer active).
type event struct {
	at      time.Time
	capture int
	fire    bool
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	return e[i].at.Before(e[j].at) || (e[i].at.Equal(e[j].at) && e[i].capture < e[j].capture)
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// pending is an alert in the operator's inbox.
type pending struct {
	alert    policy.Alert
	received time.Time
}

// Run simulates one trial: the fleet's stalls (pipelines/lab/sim), the
// detector's pattern classifier (detect.Classify) and alerting
// (alerts.Decide) every DetectEvery over the stalls that have happened,
// and the operator's policy (cfg.Decide, as the CapturePolicy controller
// runs it: woken when a Capture fires or is indexed, by an alert, and at
// the decision's RequeueAt) with recorders that fire on the first stall of
// their host once armed. All on a simulated clock.
func Run(cfg Config) (Trial, error) {
	if err := cfg.Validate(); err != nil {
		return Trial{}, err
	}
	decide := cfg.Decide
	if decide == nil {
		decide = policy.Decide
	}
	period := cfg.Pattern.Period()
	// Each trial starts at its own offset into the rotation epoch.
	base := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	start := base.Add(time.Duration((cfg.Seed * 0x9e3779b97f4a7c15) % uint64(max(cfg.RotationPeriod, time.Minute))))
	simCfg := sim.Config{
		Scenario: sim.ThousandSpikes, Service: service, Seed: cfg.Seed, Hosts: cfg.Hosts,
		HWClasses: cfg.HWClasses, Start: start,
		Duration:  cfg.MaxDetect + time.Duration(cfg.Horizon+1)*period,
		PeriodMin: cfg.Pattern.PeriodMin, PeriodMax: cfg.Pattern.PeriodMax,
		Fraction: cfg.Pattern.Fraction, Skew: 1,
	}.Defaults()
	if err := simCfg.Validate(); err != nil {
		return Trial{}, fmt.Errorf("capture strategy: %w", err)
	}
	hosts, _ := sim.Plan(simCfg)

	// The fleet: nodes, classes, each host's stalls.
	nodes := make([]policy.Node, len(hosts))
	classOf := make(map[string]string, len(hosts))
	stalls := make(map[string][]sim.Stall, len(hosts))
	affected := map[string]bool{}
	for i, h := range hosts {
		nodes[i] = policy.Node{Name: h.Name, HWClass: h.HWClass}
		classOf[h.Name] = h.HWClass
		if cfg.Pattern.OnlyClass != "" && h.HWClass != cfg.Pattern.OnlyClass {
			continue
		}
		if len(h.Stalls) > 0 {
			stalls[h.Name] = h.Stalls
			affected[h.HWClass] = true
		}
	}
	tr := Trial{Config: cfg, Start: start, Period: period, ByReason: map[policy.Reason][2]int{}}

	d := newDetector(cfg, service, start, classOf, stalls)
	in := policy.Input{
		PolicyID: fmt.Sprintf("strategy-%d", cfg.Seed), PolicyName: service + "-offcpu", Nodes: nodes,
		Sampling: policy.Sampling{Percent: cfg.BaitPercent, RotationPeriod: cfg.RotationPeriod},
		Budgets:  cfg.Budgets,
		Trigger:  policy.AlertTrigger{Services: []string{service}, PatternClasses: cfg.PatternClasses, ExtraNodes: cfg.WidenBy},
	}
	var (
		caps    []capture
		byName  = map[string]int{}
		queue   events
		inbox   []pending
		end     = start.Add(cfg.MaxDetect)
		nextReq = start
		nextDet = start.Add(cfg.DetectEvery)
	)
	for {
		now := nextReq
		if nextDet.Before(now) {
			now = nextDet
		}
		if len(queue) > 0 && queue[0].at.Before(now) {
			now = queue[0].at
		}
		if now.After(end) {
			break
		}
		wake := !now.Before(nextReq)
		for len(queue) > 0 && !queue[0].at.After(now) {
			e := heap.Pop(&queue).(event)
			c := &caps[e.capture]
			if e.fire {
				if !c.Active { // expired before the stall came
					c.fireAt = time.Time{}
					continue
				}
				c.Fired = true
				heap.Push(&queue, event{at: e.at.Add(cfg.Post + cfg.IndexDelay), capture: e.capture})
			} else {
				c.Active, c.FinishedAt, c.indexed = false, e.at, e.at
			}
			wake = true
		}
		if !now.Before(nextDet) {
			nextDet = nextDet.Add(cfg.DetectEvery)
			for _, a := range d.pass(now) {
				tr.Alerts++
				if a.PatternClass == vocab.ClassFleetRecurrent {
					if !tr.Detected {
						tr.Detected, tr.DetectedAt = true, now
						end = now.Add(time.Duration(cfg.Horizon) * period)
					}
					// Its next alert, a change, cannot go out sooner: the
					// passes in between would alert nothing the policy
					// acts on, and they are most of the run's time.
					nextDet = now.Add(d.acfg.PatternChangeEvery)
				}
				inbox = append(inbox, pending{a, now})
				wake = true
			}
		}
		if !wake {
			continue
		}

		// The CapturePolicy controller's reconcile.
		inbox = slices.DeleteFunc(inbox, func(p pending) bool { return now.Sub(p.received) > cfg.AlertTTL })
		in.Now, in.Alerts, in.State = now, in.Alerts[:0], in.State[:0]
		for _, p := range inbox {
			in.Alerts = append(in.Alerts, p.alert)
		}
		for _, c := range caps {
			if c.Active || now.Sub(c.StartedAt) < max(cfg.Budgets.PerNodeCooldown, policy.PatternWindow) {
				in.State = append(in.State, c.Arming)
			}
		}
		dec, err := decide(in)
		if err != nil {
			return Trial{}, fmt.Errorf("capture strategy: decide at %s: %w", now.Format(time.RFC3339), err)
		}
		for _, name := range dec.Expire {
			c := &caps[byName[name]]
			c.Active, c.FinishedAt, c.expired = false, now, true
		}
		for _, a := range dec.Create {
			i := len(caps)
			byName[a.Name] = i
			c := capture{Arming: a, class: classOf[a.Node]}
			if at, ok := fireTime(stalls[a.Node], now.Add(cfg.ArmDelay), cfg.TriggerDelay); ok {
				c.fireAt = at
				heap.Push(&queue, event{at: at, capture: i, fire: true})
			}
			caps = append(caps, c)
		}
		armed := map[string]int{}
		for _, c := range caps {
			if c.Reason == policy.ReasonAlert && c.PolicyID == in.PolicyID {
				armed[c.AlertKey]++
			}
		}
		inbox = slices.DeleteFunc(inbox, func(p pending) bool {
			return !in.Trigger.Matches(p.alert) || armed[p.alert.ID] >= max(in.Trigger.ExtraNodes, dec.Wants[p.alert.ID])
		})
		nextReq = now.Add(time.Hour) // the controller's MaxRequeue
		if !dec.RequeueAt.IsZero() && dec.RequeueAt.Before(nextReq) {
			nextReq = dec.RequeueAt
		}
		if len(dec.Expire) > 0 {
			// The Expired phase is a Capture event the controller watches.
			nextReq = now.Add(time.Second)
		}
	}

	first := map[string]time.Time{}
	for _, c := range caps {
		r := tr.ByReason[c.Reason]
		switch {
		case !c.indexed.IsZero():
			if f, ok := first[c.class]; !ok || c.indexed.Before(f) {
				first[c.class] = c.indexed
			}
		case c.Active && !c.Fired:
			tr.Open++
			continue
		case c.Fired: // fired, not yet indexed: covered, but not counted as a cover yet
		default:
			tr.Wasted++
			r[1]++
		}
		tr.Armings++
		r[0]++
		tr.ByReason[c.Reason] = r
	}
	for _, class := range slices.Sorted(maps.Keys(affected)) {
		cc := ClassCover{Class: class, Periods: math.Inf(1)}
		if f, ok := first[class]; ok && tr.Detected && !f.After(end) {
			cc.BeforeDetection = !f.After(tr.DetectedAt)
			cc.Periods = max(0, float64(f.Sub(tr.DetectedAt))/float64(period))
		}
		tr.Classes = append(tr.Classes, cc)
	}
	return tr, nil
}

// fireTime is when a recorder armed at armed fires: on the first stall
// that has not ended by then (one under way fires it at once), after the
// trigger's delay. Its window [fire − pre, fire + post] holds the stall's
// start: the default pre-window is 10 s, a stall a second.
func fireTime(st []sim.Stall, armed time.Time, delay time.Duration) (time.Time, bool) {
	i := sort.Search(len(st), func(i int) bool { return st[i].End().After(armed) })
	if i == len(st) {
		return time.Time{}, false
	}
	at := st[i].Start
	if at.Before(armed) {
		at = armed
	}
	return at.Add(delay), true
}

// detector is the detector's pattern stage and its alerting over the
// stalls the simulator planned, as the spike detector would find them
// (each stall one spike window): Classify over the look-back, then
// alerts.Decide, the pattern alerts mapped as the operator's intake maps
// them.
type detector struct {
	cfg     Config
	service string
	start   time.Time
	fleet   map[string]string
	hosts   []string
	starts  map[string][]time.Time
	state   alerts.State
	acfg    alerts.Config
}

func newDetector(cfg Config, service string, start time.Time, fleet map[string]string, stalls map[string][]sim.Stall) *detector {
	d := &detector{cfg: cfg, service: service, start: start, fleet: fleet, starts: map[string][]time.Time{},
		acfg: alerts.Config{}.WithDefaults()}
	for h, st := range stalls {
		d.hosts = append(d.hosts, h)
		for _, s := range st {
			d.starts[h] = append(d.starts[h], s.Start)
		}
	}
	slices.Sort(d.hosts)
	return d
}

// pass is one detector pass at now: the pattern alerts it sends.
func (d *detector) pass(now time.Time) []policy.Alert {
	from := now.Add(-d.cfg.Lookback)
	f := detect.FleetSpikes{Service: d.service, LookbackStart: from, LookbackEnd: now, DataFrom: d.start, Fleet: d.fleet}
	for _, h := range d.hosts {
		st := d.starts[h]
		// A window is found once it has ended: a stall lasts a second.
		lo := sort.Search(len(st), func(i int) bool { return !st[i].Before(from) })
		hi := sort.Search(len(st), func(i int) bool { return !st[i].Add(time.Second).Before(now) })
		if hi > lo {
			f.Hosts = append(f.Hosts, detect.HostSpikes{Host: h, HWClass: d.fleet[h], Starts: st[lo:hi]})
		}
	}
	patterns := detect.Classify(f, detect.PatternConfig{Lookback: d.cfg.Lookback})
	dec, err := alerts.Decide(d.acfg, d.state, alerts.Pass{Patterns: patterns, Services: []string{d.service}}, now)
	if err != nil {
		return nil // the defaults are valid
	}
	d.state = dec.Next
	var out []policy.Alert
	for _, a := range dec.Alerts {
		if a.Pattern == nil || a.Pattern.Change == "resolved" {
			continue
		}
		out = append(out, policyAlert(a))
	}
	return out
}

// policyAlert maps a pattern alert as the operator's Kafka intake does
// (operator/internal/alertintake/detector.go): the sample of affected hosts,
// and the classes that spike more often than the fleet when the pattern
// is hw-class-skewed, most skewed first.
func policyAlert(a alertdoc.Alert) policy.Alert {
	p := a.Pattern
	out := policy.Alert{ID: "kafka/" + a.AlertID, Service: a.Service, PatternClass: p.Class, PatternKey: p.PatternID,
		Hosts: slices.Clone(p.AffectedHostsSample)}
	if slices.Contains(p.Modifiers, vocab.ModifierHWClassSkewed) {
		for c, v := range p.HWClassSkew {
			if v > 1 {
				out.HWClasses = append(out.HWClasses, c)
			}
		}
		slices.SortFunc(out.HWClasses, func(x, y string) int {
			return cmp.Or(cmp.Compare(p.HWClassSkew[y], p.HWClassSkew[x]), cmp.Compare(x, y))
		})
	}
	return out
}
