package selfreport

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/agents/export"
	"github.com/spikehunt/spikehunt/agents/spool"
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// drops is an intake's side of Dropper, with counts the test sets.
type drops map[string]uint64

func (d drops) Drops() map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range d {
		out[k] = v
	}
	return out
}

// nullSink accepts every record (the other side of our own Sink).
type nullSink struct{}

func (nullSink) Send(kind export.Kind, payload []byte, done func(error)) error { done(nil); return nil }
func (nullSink) Close() error                                                  { return nil }
func (nullSink) Name() string                                                  { return "null" }

func newPoints(t *testing.T, d Dropper) *Points {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := spool.DefaultConfig()
	cfg.Dir = t.TempDir()
	sp, _, err := spool.Open(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	exp, err := export.New(export.Config{}, telemetry.Resource{HostName: "n1"}, nullSink{}, sp, log)
	if err != nil {
		t.Fatal(err)
	}
	return New(d, exp, sp, nil, CaptureBudget(0), time.Second, log)
}

func dropPoints(ps []telemetry.Point) map[string]float64 {
	out := map[string]float64{}
	for _, p := range ps {
		if p.Metric != telemetry.MetricRequestsDropped {
			continue
		}
		for _, a := range p.Attrs {
			if a.Key == telemetry.AttrDropReason {
				out[a.Value.(string)] += p.Value
			}
		}
	}
	return out
}

// The deltas of committed passes add up to the intake's counts; a pass
// that is not committed is covered again by the next one; a pass sooner
// than half an interval after the last is not taken.
func TestDropDeltasAddUpAcrossCommittedPasses(t *testing.T) {
	d := drops{}
	p := newPoints(t, d)
	t0 := time.Now()
	total := map[string]float64{}

	d["queue_full"] = 5
	ps, ok := p.Take(nil, t0.Add(time.Second))
	if !ok {
		t.Fatal("first pass after one interval not taken")
	}
	for r, v := range dropPoints(ps) {
		total[r] += v
	}
	p.Commit(t0.Add(time.Second))

	if _, ok := p.Take(nil, t0.Add(1200*time.Millisecond)); ok {
		t.Error("a pass 200 ms after the last was taken; want at least half an interval")
	}

	d["queue_full"], d["too_many_spans"] = 12, 3
	ps, _ = p.Take(nil, t0.Add(2*time.Second)) // the exporter is behind: not committed
	if got := dropPoints(ps)["queue_full"]; got != 7 {
		t.Errorf("queue_full delta %v, want 7", got)
	}
	d["queue_full"] = 20
	ps, ok = p.Take(nil, t0.Add(3*time.Second))
	if !ok {
		t.Fatal("pass not taken")
	}
	for r, v := range dropPoints(ps) {
		total[r] += v
	}
	p.Commit(t0.Add(3 * time.Second))
	if total["queue_full"] != 20 || total["too_many_spans"] != 3 {
		t.Errorf("committed deltas %v, want queue_full 20 and too_many_spans 3", total)
	}
}
