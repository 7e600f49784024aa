package dashboards

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/pipelines/lab/sim"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
	"github.com/spikehunt/spikehunt/pipelines/services/ingest"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopShared()
	os.Exit(code)
}

// testFleet is a thousand-spikes fleet whose stalls are NIC softirq
// storms: every host stalls for 2 s every 15–20 min at its own phase (twice
// as often on gen5), and during each stall NET_RX softirq saturates CPUs 0,
// 2, 4 and 6. Counters every second, as the agent samples them.
func testFleetConfig() sim.Config {
	return sim.Config{
		Scenario: sim.ThousandSpikes, Cause: sim.CauseNICSoftirq, Seed: 8,
		Hosts: 40, Duration: time.Hour, CounterStep: time.Second, SpikeLength: 2 * time.Second,
		Start:         testenv.RecentDay().Add(9 * time.Hour),
		CaptureBudget: 2, CaptureArmed: 0.1,
	}
}

type loadedFleet struct {
	st    *store.Embedded
	cfg   sim.Config
	truth sim.Truth
	hosts []string
	// captured is a host with captures: the drill-down shows it.
	captured string
}

// loadFleet simulates the fleet through the agents' encoding and the
// ingest's decoder into the real engine, runs the detectors over it, and
// indexes a capture for some of the spikes, as the operator would.
func loadFleet(t *testing.T, cfg sim.Config) loadedFleet {
	t.Helper()
	ctx := context.Background()
	st := testenv.ClickHouse(t)
	cfg = cfg.Defaults()
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	truth, stats, err := sim.Load(ctx, st, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("simulated %d hosts × %s: %d requests kept, %d counter points in %s", cfg.Hosts, cfg.Duration,
		stats.Kept, stats.Points, time.Since(began).Round(time.Millisecond))
	began = time.Now()
	res, err := detect.Pass(ctx, st, detect.Config{Service: cfg.Service, From: cfg.Start, To: cfg.Start.Add(cfg.Duration)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("detectors: %d spike windows, %d patterns in %s", len(res.Spikes), len(res.Patterns), time.Since(began).Round(time.Millisecond))
	// The pipeline's own figures, through the writer the ingest and
	// spikehunt detect use (pipelines/services/ingest/self_counters.go), stamped
	// inside the simulated hour: sim.Load feeds the store in process, so
	// no Kafka consumer reported rows and lag for this fleet; here one
	// reports every 10 s what the load wrote, and the detector its pass.
	ing := ingest.NewSelfCounters(st, "ingest-test")
	steps := int(cfg.Duration / (10 * time.Second))
	for i := 0; i < steps; i++ {
		a := cfg.Start.Add(time.Duration(i) * 10 * time.Second)
		b := a.Add(10 * time.Second)
		ing.Delta(ingest.MetricIngestRows, "requests", "", a, b, float64(stats.Kept)/float64(steps))
		ing.Delta(ingest.MetricIngestRows, "counters", "", a, b, float64(stats.Points)/float64(steps))
		ing.Delta(ingest.MetricIngestDLQ, "otlp_spans", "", a, b, 0)
		ing.Gauge(ingest.MetricIngestLag, "otlp_spans", "", b, float64(i%7))
	}
	if err := ing.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	self := ingest.NewSelfCounters(st, "detect-test")
	at := cfg.Start.Add(cfg.Duration - time.Minute)
	for stage, d := range map[string]time.Duration{"total": res.Timing.Total, "spikes": res.Timing.Spikes,
		"suspects": res.Timing.Suspects, "patterns": res.Timing.Patterns} {
		self.Gauge("spikehunt.detect.pass_seconds", "", stage, at, d.Seconds())
	}
	if err := self.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// A store that took a part out and rebuilt it, as serve-clickhouse's
	// care writes it (pipelines/services/storecare).
	care := ingest.NewSelfCounters(st, "store-test")
	for i := 0; i < steps; i += 6 {
		b := cfg.Start.Add(time.Duration(i+1) * 10 * time.Second)
		care.Gauge("spikehunt.store.volume.free_bytes", "", "", b, float64(1<<30-i<<20))
		care.Gauge("spikehunt.store.volume.size_bytes", "", "", b, 2<<30)
	}
	care.Delta("spikehunt.store.parts.detached", "latency_1m", "", at, at.Add(time.Second), 1)
	care.Delta("spikehunt.store.parts.rebuilt", "latency_1m", "", at, at.Add(time.Second), 1)
	if err := care.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(res.Spikes) == 0 {
		t.Fatal("the detectors found no spike windows in a thousand-spikes fleet")
	}
	// One perf capture for each of the first five spike windows, plus one
	// manual capture that covers no spike.
	for i, sp := range res.Spikes[:5] {
		insertCapture(t, st, fmt.Sprintf("cap-%d", i), sp.Host, "perf", "fleet alert", "uploaded",
			sp.Start.Add(-30*time.Second), sp.End.Add(5*time.Second), []string{sp.ID})
	}
	insertCapture(t, st, "cap-manual", res.Spikes[0].Host, "ftrace", "manual", "failed",
		cfg.Start.Add(10*time.Minute), cfg.Start.Add(10*time.Minute+20*time.Second), nil)
	hosts := map[string]bool{}
	for _, w := range truth.Windows {
		hosts[w.Host] = true
	}
	var names []string
	for i := 0; i < cfg.Hosts; i++ {
		names = append(names, fmt.Sprintf("node-%04d", i))
	}
	return loadedFleet{st: st, cfg: cfg, truth: truth, hosts: names, captured: res.Spikes[0].Host}
}

func insertCapture(t testing.TB, st store.Store, id, host, backend, trigger, status string, from, to time.Time, spikes []string) {
	t.Helper()
	q := make([]string, len(spikes))
	for i, s := range spikes {
		q[i] = "'" + s + "'"
	}
	sql := fmt.Sprintf(`INSERT INTO captures (capture_id, host, node, backend, profile, window_start, window_end, trigger,
		spike_ids, uri, bytes, lost_events, checksum, status, created_at, updated_at)
	VALUES ('%s', '%s', '%s', '%s', 'default', fromUnixTimestamp64Milli(%d), fromUnixTimestamp64Milli(%d), '%s',
		[%s], 's3://spikehunt/fleet/captures/%s.json', 1048576, 3, 'sha256:00', '%s', now64(3), now64(3))`,
		id, host, host, backend, from.UnixMilli(), to.UnixMilli(), trigger, strings.Join(q, ","), id, status)
	if err := st.Exec(context.Background(), sql); err != nil {
		t.Fatal(err)
	}
}

// vars is a dashboard's variables as a user would first see them: the
// service, every hardware class and host ("All"), or one host where the
// dashboard drills into one.
func (f loadedFleet) vars(b Board, host string) grafanaQuery {
	q := grafanaQuery{Vars: map[string]any{}, All: map[string]bool{}}
	for _, v := range b.Vars {
		switch {
		case v.Name == "service":
			q.Vars["service"] = f.cfg.Service
		case v.Name == "host" && !v.Multi:
			q.Vars["host"] = host
		case v.Name == "host":
			q.Vars["host"], q.All["host"] = f.hosts, true
		case v.Name == "hw_class":
			q.Vars["hw_class"], q.All["hw_class"] = f.cfg.HWClasses, true
		case v.IncludeAll:
			q.Vars[v.Name], q.All[v.Name] = []string{"x"}, true
		default:
			q.Vars[v.Name] = v.Default
		}
	}
	return q
}

// result is one panel query's answer.
type result struct {
	*store.Table
	sql string
}

func (r result) col(name string) int {
	for i, n := range r.Names {
		if n == name {
			return i
		}
	}
	return -1
}

func (r result) float(row int, col string) float64 {
	i := r.col(col)
	if i < 0 {
		return math.NaN()
	}
	v, err := strconv.ParseFloat(r.Rows[row][i], 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

func run(t testing.TB, st store.Store, q grafanaQuery, sql string) result {
	t.Helper()
	x, err := q.Expand(sql)
	if err != nil {
		t.Fatalf("expanding macros: %v\n%s", err, sql)
	}
	tab, err := store.Select(context.Background(), st, x)
	if err != nil {
		t.Fatalf("%v\n%s", err, x)
	}
	if tab.Names == nil {
		// No rows, no block: ask the engine for the columns instead.
		desc, err := store.Select(context.Background(), st, "DESCRIBE TABLE ("+x+")")
		if err != nil {
			t.Fatalf("describing the result: %v\n%s", err, x)
		}
		for _, r := range desc.Rows {
			tab.Names, tab.Types = append(tab.Names, r[0]), append(tab.Types, r[1])
		}
	}
	return result{tab, x}
}

func numeric(typ string) bool {
	typ = strings.TrimSuffix(strings.TrimPrefix(typ, "Nullable("), ")")
	return strings.HasPrefix(typ, "Float") || strings.HasPrefix(typ, "UInt") || strings.HasPrefix(typ, "Int") ||
		strings.HasPrefix(typ, "Decimal")
}

func stringType(typ string) bool {
	return strings.Contains(typ, "String")
}

func timeType(typ string) bool { return strings.HasPrefix(typ, "DateTime") }

// checkShape is what the panel type needs from its query's columns.
func checkShape(p Panel, r result) error {
	switch {
	case p.Type == "table":
		var want []string
		for _, c := range p.Columns {
			want = append(want, c.Name)
		}
		if strings.Join(r.Names, ",") != strings.Join(want, ",") {
			return fmt.Errorf("columns %v, the table names %v", r.Names, want)
		}
	case p.Format == TimeSeries:
		if len(r.Names) < 2 || r.Names[0] != "time" || !timeType(r.Types[0]) {
			return fmt.Errorf("a time series starts with a DateTime column named time: got %v %v", r.Names, r.Types)
		}
		values := 0
		for i, typ := range r.Types[1:] {
			switch {
			case numeric(typ):
				values++
			case stringType(typ):
				// a label: one series per value
			default:
				return fmt.Errorf("column %s is %s: a time series has labels (strings) and values (numbers)", r.Names[i+1], typ)
			}
		}
		if values == 0 {
			return fmt.Errorf("no value column in %v %v", r.Names, r.Types)
		}
		if p.Type == "heatmap" && values != 1 {
			return fmt.Errorf("a heatmap row is one value per label: %v", r.Names)
		}
	default: // stat, bargauge: numbers, optionally named by a string column
		values := 0
		for _, typ := range r.Types {
			if numeric(typ) {
				values++
			}
		}
		if values == 0 {
			return fmt.Errorf("no numeric column in %v %v", r.Names, r.Types)
		}
	}
	return nil
}

// emptyOnSim are panels whose data the simulator does not produce: it has
// no per-IRQ interrupts. Their queries still run and are checked for shape
// (and the benchmark fills them).
var emptyOnSim = map[string]bool{"interrupts": true}

func TestPanelsOnSimulatedFleet(t *testing.T) {
	f := loadFleet(t, testFleetConfig())
	end := f.cfg.Start.Add(f.cfg.Duration)
	storm := f.truth.Windows[len(f.truth.Windows)/2]
	results := map[string]result{}
	expanded := map[string]string{}
	for _, b := range Boards() {
		q := f.vars(b, f.captured)
		q.From, q.To = f.cfg.Start, end
		for _, r := range b.Rows {
			for _, p := range r.Panels {
				if p.SQL == "" {
					continue
				}
				t.Run(b.File+"/"+p.Key, func(t *testing.T) {
					q := q
					q.Interval = autoInterval(q.From, q.To, 0)
					res := run(t, f.st, q, p.SQL)
					results[b.File+"/"+p.Key] = res
					expanded[b.File+"/"+p.Key] = res.sql
					if err := checkShape(p, res); err != nil {
						t.Errorf("%s: %v\n%s", p.Title, err, res.sql)
					}
					for _, c := range linkFields(p) {
						if res.col(c) < 0 {
							t.Errorf("%s: a data link reads ${__data.fields.%s}, not a column of the result %v", p.Title, c, res.Names)
						}
					}
					if len(res.Rows) == 0 && !emptyOnSim[p.Key] {
						t.Errorf("%s: no rows over the simulated fleet\n%s", p.Title, res.sql)
					}
				})
			}
		}
		for _, a := range b.Annotations {
			t.Run(b.File+"/annotation", func(t *testing.T) {
				res := run(t, f.st, q, a.SQL)
				for _, c := range []string{"time", "timeEnd", "text"} {
					if i := res.col(c); i < 0 || (c != "text" && !timeType(res.Types[i])) || (c == "text" && !stringType(res.Types[i])) {
						t.Errorf("annotation %q: column %s missing or mistyped in %v %v", a.Name, c, res.Names, res.Types)
					}
				}
				if len(res.Rows) == 0 {
					t.Errorf("annotation %q: no spike windows on %s", a.Name, f.captured)
				}
			})
		}
		for _, v := range b.Vars {
			if v.SQL == "" {
				continue
			}
			t.Run(b.File+"/var-"+v.Name, func(t *testing.T) {
				res := run(t, f.st, q, v.SQL)
				if len(res.Names) != 1 || len(res.Rows) == 0 {
					t.Errorf("variable %s: want one column of values, got %v with %d rows", v.Name, res.Names, len(res.Rows))
				}
			})
		}
	}

	t.Run("provisioned-http-datasource-through-serve-clickhouse", func(t *testing.T) {
		rows := map[string]int{}
		for k, r := range results {
			rows[k] = len(r.Rows)
		}
		serveAndQueryOverHTTP(t, f.st, expanded, rows)
	})

	t.Run("answer/per-host-panel-reads-the-same-maxima-from-the-minute-rollup", func(t *testing.T) {
		p := findPanel(t, "fleet-overview", "per-host")
		q := f.vars(Boards()[0], "")
		q.From, q.To, q.Interval = f.cfg.Start, end, time.Minute
		perHost := func(r result) map[string]float64 {
			m := map[string]float64{}
			for i := range r.Rows {
				h := r.Rows[i][r.col("host")]
				m[h] = math.Max(m[h], r.float(i, "max_ms"))
			}
			return m
		}
		minute, second := perHost(run(t, f.st, q, p.SQL)), perHost(results["fleet-overview/per-host"])
		if len(minute) != len(second) {
			t.Fatalf("%d hosts at 1 min, %d at %s", len(minute), len(second), autoInterval(q.From, q.To, 0))
		}
		for h, v := range second {
			if minute[h] != v {
				t.Errorf("%s: max %.3f ms at one-minute intervals (latency_1m), %.3f ms per second (latency_1s)", h, minute[h], v)
			}
		}
	})

	// The answers the panels exist for.
	t.Run("answer/per-host-panel-shows-spikes-on-every-host", func(t *testing.T) {
		r := results["fleet-overview/per-host"]
		peak := map[string]float64{}
		for i := range r.Rows {
			h := r.Rows[i][r.col("host")]
			peak[h] = math.Max(peak[h], r.float(i, "max_ms"))
		}
		spiky := 0
		for _, p := range peak {
			if p >= 0.5*float64(f.cfg.SpikeLength.Milliseconds()) {
				spiky++
			}
		}
		if len(peak) != f.cfg.Hosts || float64(spiky) < 0.9*float64(f.cfg.Hosts) {
			t.Errorf("the per-host panel shows a spike on %d of %d hosts (%d rows); want ≥ 90%%", spiky, len(peak), len(r.Rows))
		}
		t.Logf("the per-host panel shows a spike on %d of %d hosts", spiky, len(peak))
	})
	t.Run("answer/averaged-panel-stays-below-the-spike-size", func(t *testing.T) {
		r := results["fleet-overview/averaged"]
		worst := 0.0
		for i := range r.Rows {
			worst = math.Max(worst, math.Max(r.float(i, "fleet mean"), r.float(i, "hosts' max, averaged")))
		}
		spike := float64(f.cfg.SpikeLength.Milliseconds())
		if worst <= 0 || worst >= spike/2 {
			t.Errorf("the averaged panel peaks at %.1f ms; want it well below the %v spikes", worst, f.cfg.SpikeLength)
		}
		t.Logf("averaged panel max %.1f ms against %v spikes", worst, f.cfg.SpikeLength)
	})
	t.Run("answer/softirq-panel-shows-the-storm-cpus", func(t *testing.T) {
		p := findPanel(t, "host-drilldown", "softirq-cpu")
		b := Boards()[1]
		q := f.vars(b, storm.Host)
		q.From, q.To = storm.Start.Add(-2*time.Minute), storm.End.Add(2*time.Minute)
		q.Interval = autoInterval(q.From, q.To, 0)
		if q.Interval != time.Second {
			t.Fatalf("interval %s for a 4-minute range", q.Interval)
		}
		r := run(t, f.st, q, p.SQL)
		peak := map[string]float64{}
		for i := range r.Rows {
			c := r.Rows[i][r.col("cpu")]
			peak[c] = math.Max(peak[c], r.float(i, "pct"))
		}
		var cpus []string
		for c := range peak {
			cpus = append(cpus, c)
		}
		sort.Strings(cpus)
		for _, c := range cpus {
			n, err := strconv.Atoi(strings.TrimPrefix(c, "cpu "))
			if err != nil {
				t.Fatalf("CPU label %q", c)
			}
			storming := n == 0 || n == 2 || n == 4 || n == 6
			if storming && peak[c] < 85 {
				t.Errorf("%s: softirq peaks at %.1f%% during the storm at %s on %s; want near 100%%", c, peak[c], storm.Start.Format(time.TimeOnly), storm.Host)
			}
			if !storming && peak[c] > 30 {
				t.Errorf("%s: softirq peaks at %.1f%%, yet the storm is on CPUs 0, 2, 4 and 6", c, peak[c])
			}
		}
		if len(cpus) != f.cfg.CPUs {
			t.Errorf("the panel has %d CPU rows, the hosts %d CPUs", len(cpus), f.cfg.CPUs)
		}
		t.Logf("softirq peaks during the storm: %v", peak)
	})
}

func findPanel(t testing.TB, file, key string) Panel {
	for _, b := range Boards() {
		for _, r := range b.Rows {
			for _, p := range r.Panels {
				if b.File == file && p.Key == key {
					return p
				}
			}
		}
	}
	t.Fatalf("no panel %s/%s", file, key)
	return Panel{}
}
