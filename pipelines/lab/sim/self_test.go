package sim

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// Over many host-hours the simulated agents drop nothing but in rare small
// bursts, and count an export record per flush tick with a kept request.
func TestAgentFiguresAreQuietWithRareSmallDropBursts(t *testing.T) {
	cfg := Config{Scenario: Healthy, Start: epoch, Seed: 2}.Defaults()
	const hosts, step = 200, 10 * time.Second
	intervals, bursts := 0, 0
	for i := range hosts {
		g := newSelfGen(cfg, &Host{Index: i})
		for a := epoch; a.Before(epoch.Add(6 * time.Hour)); a = a.Add(step) {
			// Two kept requests in one 200 ms tick, one in another.
			g.kept([]telemetry.Request{{Start: a.Add(50 * time.Millisecond)}, {Start: a.Add(10 * time.Millisecond)}, {Start: a.Add(700 * time.Millisecond)}})
			ps := g.interval(a, a.Add(step), nil)
			intervals++
			for _, p := range ps {
				switch {
				case p.Metric == telemetry.MetricRequestsDropped && p.Value > 0:
					bursts++
					if p.Value > 3*step.Seconds() {
						t.Fatalf("a burst of %v drops in %v", p.Value, step)
					}
				case p.Metric == telemetry.MetricExportRecords && p.Attrs[0].Value == telemetry.SignalSpans && p.Value != 2:
					t.Fatalf("%v span records for kept requests in two flush ticks", p.Value)
				case p.Metric == telemetry.MetricSpoolBytes && (p.Value != 0 || !p.IsGauge()):
					t.Fatalf("spool %+v", p)
				case strings.HasPrefix(p.Metric, "spikehunt.capture."):
					t.Fatalf("%s without a capture budget", p.Metric)
				}
			}
		}
	}
	// 1,200 host-hours at one burst per 6 h: ~200.
	if bursts < 140 || bursts > 260 {
		t.Errorf("%d drop bursts in %d intervals, want ~200", bursts, intervals)
	}
}

// A loaded fleet holds every agent figure per host, and the ingester's
// own rows count what it stored.
func TestLoadCarriesTheAgentsOwnFigures(t *testing.T) {
	ctx := context.Background()
	st := testenv.ClickHouse(t)
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Scenario: ThousandSpikes, Hosts: 6, Duration: 30 * time.Minute, Start: epoch, Seed: 9, CaptureBudget: 2, CaptureArmed: 0.5}
	_, stats, err := Load(ctx, st, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := func(sql string) string {
		t.Helper()
		tab, err := store.Select(ctx, st, sql)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, r := range tab.Rows {
			lines = append(lines, strings.Join(r, " "))
		}
		return strings.Join(lines, "\n")
	}
	// Per metric and mode: hosts, whether all rows are deltas (1) or
	// gauges (0), cpu, device, and the range of values.
	got := q(`SELECT metric, mode, uniqExact(host), min(interval_ms > 0), max(interval_ms > 0), min(cpu), max(device), min(value), max(value)
		FROM counters WHERE metric LIKE 'spikehunt.agent.%' OR metric LIKE 'spikehunt.capture.%' GROUP BY metric, mode ORDER BY metric, mode`)
	lines := strings.Split(got, "\n")
	want := []string{
		"spikehunt.agent.export.records metrics 6 1 1 -1  1 1",
		"spikehunt.agent.export.records spans 6 1 1 -1  ", // values checked below
		"spikehunt.agent.requests.dropped queue_full 6 1 1 -1  0 ",
		"spikehunt.agent.spool.bytes  6 0 0 -1  0 0",
		"spikehunt.capture.active  6 0 0 -1  0 1",
		"spikehunt.capture.max_concurrent  6 0 0 -1  2 2",
	}
	if len(lines) != len(want) {
		t.Fatalf("agent figures:\n%s", got)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("agent figures row %d: %q, want %q…", i, lines[i], w)
		}
	}
	// Spans records: at least one per interval's kept requests, fewer than
	// the kept requests themselves (several share a flush tick).
	recs, _ := strconv.ParseInt(q("SELECT sum(value) FROM counters WHERE metric = 'spikehunt.agent.export.records' AND mode = 'spans'"), 10, 64)
	if recs < stats.Kept/3 || recs > stats.Kept {
		t.Errorf("%d span records for %d kept requests", recs, stats.Kept)
	}
	// The in-process ingester's rows: what it stored, by destination.
	if got, want := q("SELECT device, sum(value) FROM counters WHERE metric = 'spikehunt.ingest.rows' GROUP BY device ORDER BY device"),
		"counters "+strconv.FormatInt(stats.Points, 10)+"\ndlq 0\nrequests "+strconv.FormatInt(stats.Kept, 10); got != want {
		t.Errorf("ingest rows:\n%s\nwant\n%s", got, want)
	}
	if got := q("SELECT device, argMax(value, ts_start) FROM counters WHERE metric = 'spikehunt.ingest.lag' GROUP BY device ORDER BY device"); got != "otlp_metrics 0\notlp_spans 0" {
		t.Errorf("lag at the end of the load:\n%s", got)
	}
}
