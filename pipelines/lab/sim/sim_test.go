package sim

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/internal/vocab"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// epoch is a recent midnight: the simulated fleet's rows must stay inside
// the store's TTLs, which a fixed date leaves.
var epoch = testenv.RecentDay().AddDate(0, 0, -1)

func plan(t *testing.T, c Config) ([]Host, Truth, Config) {
	t.Helper()
	c.Start = epoch
	c = c.Defaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	h, tr := Plan(c)
	return h, tr, c
}

func stallsPerHost(hosts []Host) map[string]int {
	m := map[string]int{}
	for _, h := range hosts {
		m[h.Name] = len(h.Stalls)
	}
	return m
}

func TestPlanScenarios(t *testing.T) {
	t.Run("healthy and slow-creep have no stalls and no pattern", func(t *testing.T) {
		for _, sc := range []string{Healthy, SlowCreep} {
			_, tr, _ := plan(t, Config{Scenario: sc})
			if len(tr.Windows) != 0 || tr.Class != "" {
				t.Errorf("%s: %d windows, class %q; want none", sc, len(tr.Windows), tr.Class)
			}
		}
	})
	t.Run("thousand-spikes: every host recurs on a 15–20 min period at its own phase, twice as often on gen5", func(t *testing.T) {
		hosts, tr, c := plan(t, Config{Scenario: ThousandSpikes})
		if tr.Class != vocab.ClassFleetRecurrent || len(tr.Modifiers) != 1 || tr.Modifiers[0] != vocab.ModifierHWClassSkewed {
			t.Fatalf("truth class %q %v", tr.Class, tr.Modifiers)
		}
		perClass := map[string][]float64{}
		firsts := map[time.Duration]bool{}
		for _, h := range hosts {
			if len(h.Stalls) < 2 {
				t.Fatalf("%s has %d stalls", h.Name, len(h.Stalls))
			}
			firsts[h.Stalls[0].Start.Sub(c.Start).Round(time.Millisecond)] = true
			for i := 1; i < len(h.Stalls); i++ {
				perClass[h.HWClass] = append(perClass[h.HWClass], h.Stalls[i].Start.Sub(h.Stalls[i-1].Start).Minutes())
			}
		}
		gen4, gen5 := median(perClass["gen4"]), median(perClass["gen5"])
		if gen4 < 15 || gen4 > 20 || math.Abs(gen4/gen5-2) > 0.1 {
			t.Errorf("median interval gen4 %.1f min, gen5 %.1f min; want 15–20 and half of it", gen4, gen5)
		}
		if len(firsts) < len(hosts)*9/10 {
			t.Errorf("only %d distinct phases over %d hosts", len(firsts), len(hosts))
		}
	})
	t.Run("synchronized: every host stalls in the same 30 s once an hour", func(t *testing.T) {
		hosts, tr, _ := plan(t, Config{Scenario: Synchronized})
		for _, h := range hosts {
			if len(h.Stalls) != 6 || !h.Stalls[0].Start.Equal(hosts[0].Stalls[0].Start) || h.Stalls[0].Length != 30*time.Second {
				t.Fatalf("%s: %+v", h.Name, h.Stalls)
			}
		}
		if tr.Class != vocab.ClassFleetSynchronized || !tr.SecondOccurrence.Equal(hosts[0].Stalls[1].Start) {
			t.Errorf("truth %q, second occurrence %v", tr.Class, tr.SecondOccurrence)
		}
	})
	t.Run("bad-host: one host stalls every ~3 min, the rest never", func(t *testing.T) {
		hosts, tr, _ := plan(t, Config{Scenario: BadHost})
		var bad []int
		for _, n := range stallsPerHost(hosts) {
			if n > 0 {
				bad = append(bad, n)
			}
		}
		if len(bad) != 1 || bad[0] < 80 || bad[0] > 160 || tr.Class != vocab.ClassIsolatedHost {
			t.Errorf("hosts with stalls %v, class %q; want one with ~120", bad, tr.Class)
		}
	})
	t.Run("down-interface: a few hosts, isolated", func(t *testing.T) {
		_, tr, _ := plan(t, Config{Scenario: DownInterface})
		if tr.AffectedHosts != 3 || tr.Class != vocab.ClassIsolatedHost || tr.TopSuspects[0].Device != "eth1" {
			t.Errorf("truth %+v", tr)
		}
	})
	t.Run("noisy: Poisson spikes on every host, no pattern", func(t *testing.T) {
		hosts, tr, _ := plan(t, Config{Scenario: Noisy})
		if tr.Class != "" {
			t.Errorf("class %q", tr.Class)
		}
		// 300 hosts × 6 h at one per 5 h: about 360.
		if n := len(tr.Windows); n < 280 || n > 440 {
			t.Errorf("%d noise windows over %d hosts, want ~360", n, len(hosts))
		}
	})
	t.Run("parameters are flags, not constants", func(t *testing.T) {
		hosts, tr, _ := plan(t, Config{Scenario: ThousandSpikes, Hosts: 50, Fraction: 0.5, PeriodMin: 40 * time.Minute, PeriodMax: 40 * time.Minute, Skew: 1, SpikeLength: 3 * time.Second})
		if tr.AffectedHosts != 25 || tr.Period != 40*time.Minute || len(tr.Modifiers) != 0 {
			t.Errorf("truth %+v", tr)
		}
		for _, h := range hosts {
			for _, s := range h.Stalls {
				if s.Length != 3*time.Second {
					t.Fatalf("stall %+v", s)
				}
			}
		}
	})
}

func TestConfigRejectsNonsense(t *testing.T) {
	for _, c := range []Config{
		{Scenario: "nope"},
		{Scenario: Healthy, Hosts: -1},
		{Scenario: Healthy, Cause: "gremlins"},
		{Scenario: NICSoftirqStorm, CPUs: 4},
		{Scenario: ThousandSpikes, Fraction: 2},
		{Scenario: ThousandSpikes, PeriodMin: time.Second},
		{Scenario: ThousandSpikes, CaptureArmed: 0.5},
		{Scenario: ThousandSpikes, CaptureBudget: 65},
	} {
		if err := c.Defaults().Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

// collectSink keeps every message.
type collectSink struct {
	mu   sync.Mutex
	msgs map[string][][]byte // by host
}

func (c *collectSink) Send(_ context.Context, sig Signal, host string, msg []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.msgs == nil {
		c.msgs = map[string][][]byte{}
	}
	k := host + "/" + strconv.Itoa(int(sig))
	c.msgs[k] = append(c.msgs[k], msg)
	return nil
}

func TestRunIsDeterministic(t *testing.T) {
	cfg := Config{Scenario: NICSoftirqStorm, Hosts: 6, Duration: 20 * time.Minute, Start: epoch, Seed: 7}
	var a, b collectSink
	if _, _, err := Run(context.Background(), cfg, &a, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Run(context.Background(), cfg, &b, nil); err != nil {
		t.Fatal(err)
	}
	if len(a.msgs) != 12 {
		t.Fatalf("%d host/signal streams, want 12", len(a.msgs))
	}
	for k, ms := range a.msgs {
		if len(ms) != len(b.msgs[k]) {
			t.Fatalf("%s: %d vs %d messages", k, len(ms), len(b.msgs[k]))
		}
		for i := range ms {
			if !bytes.Equal(ms[i], b.msgs[k][i]) {
				t.Fatalf("%s message %d differs between runs", k, i)
			}
		}
	}
	cfg.Seed = 8
	var c collectSink
	Run(context.Background(), cfg, &c, nil)
	if bytes.Equal(c.msgs["node-0000/0"][0], a.msgs["node-0000/0"][0]) {
		t.Error("another seed gave the same requests")
	}
}

// TestLoadMatchesTruth sends a small storm fleet through the ingest into
// the real engine and checks what landed against the plan: the weighted
// request count, a slow second at every stall, none elsewhere, and the
// storm's signature on CPUs 0, 2, 4 and 6 only.
func TestLoadMatchesTruth(t *testing.T) {
	ctx := context.Background()
	st := testenv.ClickHouse(t)
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Scenario: NICSoftirqStorm, Hosts: 10, Fraction: 0.5, Duration: time.Hour, Start: epoch, Seed: 3}
	truth, stats, err := Load(ctx, st, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := func(sql string) [][]string {
		t.Helper()
		tab, err := store.Select(ctx, st, sql)
		if err != nil {
			t.Fatal(err)
		}
		return tab.Rows
	}
	got := q("SELECT sum(weighted_count), sum(kept_count) FROM latency_1s")[0]
	served, _ := strconv.ParseFloat(got[0], 64)
	kept, _ := strconv.ParseInt(got[1], 10, 64)
	// 10 hosts × 3600 s × 30 req/s × the diurnal swing at this hour.
	want := 0.0
	for s := 0; s < 3600; s++ {
		want += 10 * 30 * load(epoch.Add(time.Duration(s)*time.Second))
	}
	if math.Abs(served/want-1) > 0.03 || kept != stats.Kept {
		t.Errorf("weighted requests %.0f (want ~%.0f), kept rows %d (sim kept %d)", served, want, kept, stats.Kept)
	}
	// Seconds slower than 200 ms: exactly the stalls' seconds.
	slow := map[string]bool{}
	for _, r := range q("SELECT host, toUnixTimestamp(ts) FROM latency_1s GROUP BY host, ts HAVING max(max_us) > 200000") {
		slow[r[0]+"@"+r[1]] = true
	}
	hit := 0
	for _, w := range truth.Windows {
		for s := w.Start.Truncate(time.Second); s.Before(w.End); s = s.Add(time.Second) {
			if slow[w.Host+"@"+strconv.FormatInt(s.Unix(), 10)] {
				hit++
				break
			}
		}
	}
	if len(truth.Windows) == 0 || hit != len(truth.Windows) {
		t.Errorf("%d of %d stalls have a slow second", hit, len(truth.Windows))
	}
	if len(slow) > len(truth.Windows)*5 {
		t.Errorf("%d slow seconds for %d stalls of 3 s", len(slow), len(truth.Windows))
	}
	// Softirq share per CPU in the counter intervals that overlap a storm
	// against those that do not, on affected hosts.
	type share struct{ during, duringMS, quiet, quietMS float64 }
	perCPU := map[int]*share{}
	byHost := map[string][]Window{}
	for _, w := range truth.Windows {
		byHost[w.Host] = append(byHost[w.Host], w)
	}
	for _, r := range q("SELECT host, cpu, toUnixTimestamp64Milli(ts_start), interval_ms, value FROM counters WHERE metric = 'system.cpu.time' AND mode = 'softirq'") {
		ws := byHost[r[0]]
		if len(ws) == 0 {
			continue
		}
		cpu, _ := strconv.Atoi(r[1])
		ms, _ := strconv.ParseInt(r[2], 10, 64)
		iv, _ := strconv.ParseFloat(r[3], 64)
		v, _ := strconv.ParseFloat(r[4], 64)
		a, b := time.UnixMilli(ms), time.UnixMilli(ms).Add(time.Duration(iv)*time.Millisecond)
		storm := false
		for _, w := range ws {
			storm = storm || (w.Start.Before(b) && w.End.After(a))
		}
		s := perCPU[cpu]
		if s == nil {
			s = &share{}
			perCPU[cpu] = s
		}
		if storm {
			s.during, s.duringMS = s.during+v, s.duringMS+iv
		} else {
			s.quiet, s.quietMS = s.quiet+v, s.quietMS+iv
		}
	}
	if len(perCPU) != 8 {
		t.Fatalf("softirq time for %d CPUs, want 8", len(perCPU))
	}
	for cpu, s := range perCPU {
		during, quiet := s.during/s.duringMS*1000, s.quiet/s.quietMS*1000
		storm := cpu%2 == 0 && cpu <= 6
		// A 3 s storm at 95% in a 10 s interval: ~0.28 more than usual.
		if storm && during < quiet+0.15 || !storm && during > quiet*1.3 {
			t.Errorf("cpu %d softirq share %.3f during storms vs %.3f otherwise", cpu, during, quiet)
		}
	}
	// Every interface of every host reports, the down one with its state.
	if got := q("SELECT count(DISTINCT host), arrayStringConcat(groupUniqArray(attrs['spikehunt.network.operstate']), ',') FROM counters WHERE metric = 'system.network.packet.count' AND device = 'eth1'")[0]; got[0] != "10" || got[1] != "down" {
		t.Errorf("eth1: %v", got)
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// TestLoadIsIdempotent: a second load of the same configuration sends
// nothing; a load that did not finish (its record gone, its rows half
// there) is replaced, not added to.
func TestLoadIsIdempotent(t *testing.T) {
	ctx := context.Background()
	st := testenv.ClickHouse(t)
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	counts := func() string {
		// Not the ingester's own rows (spikehunt.ingest.*): each load writes
		// those anew, about itself rather than the fleet.
		tab, err := store.Select(ctx, st, "SELECT toString((SELECT count() FROM requests)), toString((SELECT sum(weighted_count) FROM latency_1s)), toString((SELECT count() FROM counters WHERE metric NOT LIKE 'spikehunt.ingest.%'))")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(tab.Rows[0], " ")
	}
	cfg := Config{Scenario: ThousandSpikes, Hosts: 5, Duration: 30 * time.Minute, Start: epoch, Seed: 4}
	if _, s, err := Load(ctx, st, cfg, nil, nil); err != nil || s.Skipped || s.Kept == 0 {
		t.Fatalf("first load: %+v, %v", s, err)
	}
	want := counts()
	if _, s, err := Load(ctx, st, cfg, nil, nil); err != nil || !s.Skipped {
		t.Fatalf("second load: %+v, %v; want skipped", s, err)
	}
	if got := counts(); got != want {
		t.Errorf("after a second load: %s, want %s", got, want)
	}
	// A crash half-way: the record is missing and only part of the rows.
	for _, q := range []string{"DELETE FROM sim_loads WHERE 1", "DELETE FROM requests WHERE host = 'node-0001'", "DELETE FROM counters WHERE host = 'node-0002'"} {
		if err := st.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, s, err := Load(ctx, st, cfg, nil, nil); err != nil || s.Skipped {
		t.Fatalf("load after a partial one: %+v, %v", s, err)
	}
	if got := counts(); got != want {
		t.Errorf("after replacing a partial load: %s, want %s", got, want)
	}
	// The requests aged out (their TTL is shorter than the rollups'): a
	// reload must not count the rollups twice.
	for _, q := range []string{"DELETE FROM sim_loads WHERE 1", "DELETE FROM requests WHERE 1"} {
		if err := st.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, s, err := Load(ctx, st, cfg, nil, nil); err != nil || s.Skipped {
		t.Fatalf("load after the requests aged out: %+v, %v", s, err)
	}
	if got := counts(); got != want {
		t.Errorf("after reloading a load whose requests aged out: %s, want %s", got, want)
	}
	// Another seed is another fleet.
	cfg.Seed = 5
	if _, s, err := Load(ctx, st, cfg, nil, nil); err != nil || s.Skipped {
		t.Fatalf("another seed: %+v, %v", s, err)
	}
}

// endpoint-stall: every host's stalls hold up /checkout's requests and no
// other endpoint's, at 8 requests per second over four endpoints; the
// truth names /checkout as stalled and the other three as unaffected.
func TestEndpointStallHoldsUpOnlyCheckout(t *testing.T) {
	cfg := Config{Scenario: EndpointStall, Hosts: 20, Duration: time.Hour, Start: epoch, Seed: 5}.Defaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	hosts, truth := Plan(cfg)
	if cfg.Service != "storefront" || cfg.RPS != 8 || truth.Class != vocab.ClassFleetRecurrent ||
		!slices.Equal(truth.StalledEndpoints, []string{"/checkout"}) || !slices.Equal(truth.UnaffectedEndpoints, []string{"/search", "/feed", "/profile"}) {
		t.Fatalf("config %s at %g req/s, truth %q, stalled %v, unaffected %v", cfg.Service, cfg.RPS, truth.Class, truth.StalledEndpoints, truth.UnaffectedEndpoints)
	}
	slow := map[string]int{}
	served := map[string]int{}
	for i := range hosts {
		g := &requestGen{cfg: cfg, eps: endpointsOf(cfg.Scenario), host: &hosts[i], rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i)))}
		var buf []telemetry.Request
		for sec := cfg.Start; sec.Before(cfg.Start.Add(cfg.Duration)); sec = sec.Add(time.Second) {
			buf = g.second(sec, buf[:0])
			for _, r := range buf {
				served[r.Endpoint] += int(r.Weight)
				if r.Duration > 200*time.Millisecond {
					slow[r.Endpoint]++
				}
			}
		}
	}
	// Four stalls per host-hour, two /checkout requests caught in each.
	if slow["/checkout"] < 20*3*2/2 || slow["/search"]+slow["/feed"]+slow["/profile"] != 0 {
		t.Errorf("requests over 200 ms by endpoint %v; want many on /checkout, none elsewhere", slow)
	}
	for _, e := range []string{"/checkout", "/search", "/feed", "/profile"} {
		// A quarter of 20 hosts × 3600 s × 8 req/s × the diurnal swing.
		if n := served[e]; n < 100_000 || n > 200_000 {
			t.Errorf("%s served %d requests, want about a quarter of the fleet's", e, n)
		}
	}
}
