package detect

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/internal/store"
)

// window is a spike window as tests state it: host and seconds from dataStart.
type window struct {
	Host       string
	Start, End int
}

func windowsOf(rows []spikeRow) []window {
	var out []window
	for _, r := range rows {
		out = append(out, window{r.Host, int(r.Start.Sub(dataStart).Seconds()), int(r.End.Sub(dataStart).Seconds())})
	}
	return out
}

func everyHost(n, start, end int) []window {
	var out []window
	for h := 0; h < n; h++ {
		out = append(out, window{host(h), start, end})
	}
	return out
}

func TestDetectSpikeWindows(t *testing.T) {
	tests := []struct {
		name string
		load fleetLoad
		want []window
	}{
		{
			name: "a 1 s stall on one host is a one-second window",
			load: fleetLoad{hosts: 20, seconds: 3600, stall: "h = 3 AND s = 1805"},
			want: []window{{host(3), 1805, 1806}},
		},
		{
			name: "slow seconds 3 s apart merge into one window",
			load: fleetLoad{hosts: 20, seconds: 3600, stall: "h = 3 AND s IN (1805, 1806, 1809)"},
			want: []window{{host(3), 1805, 1810}},
		},
		{
			name: "slow seconds with 6 fast seconds between are two windows",
			load: fleetLoad{hosts: 20, seconds: 3600, stall: "h = 3 AND s IN (1805, 1812)"},
			want: []window{{host(3), 1805, 1806}, {host(3), 1812, 1813}},
		},
		{
			name: "a 30 s stall on every host is a window on each host",
			load: fleetLoad{hosts: 20, seconds: 3600, stall: "s >= 1805 AND s < 1835"},
			want: everyHost(20, 1805, 1835),
		},
		{
			name: "a stall in the first seconds of a bucket is found",
			load: fleetLoad{hosts: 20, seconds: 3600, stall: "h = 4 AND s IN (1200, 1201)"},
			want: []window{{host(4), 1200, 1202}},
		},
		{
			name: "a gradual 5× creep over the hour is no spike",
			load: fleetLoad{hosts: 20, seconds: 3600, median: "4000 * pow(5, s / 3600)"},
			want: nil,
		},
		{
			name: "a 20 ms blip on a 1 ms service stays under the 25 ms floor",
			load: fleetLoad{hosts: 20, seconds: 3600, median: "1000", stall: "h = 3 AND s = 1805", stallUS: 20_000},
			want: nil,
		},
		{
			name: "a host ten times slower than the fleet is measured against its own median",
			load: fleetLoad{hosts: 20, seconds: 3600, median: "if(h = 5, 40000, 4000)", stall: "h = 5 AND s = 1805"},
			want: []window{{host(5), 1805, 1806}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			st := migrated(t)
			tt.load.insert(t, st)
			res, err := Pass(ctx, st, Config{Service: "billy", From: dataStart, To: sec(tt.load.seconds)})
			if err != nil {
				t.Fatal(err)
			}
			rows := readSpikes(t, st, "billy")
			if diff := cmp.Diff(tt.want, windowsOf(rows)); diff != "" {
				t.Fatalf("windows (-want +got):\n%s", diff)
			}
			if len(res.Spikes) != len(rows) {
				t.Errorf("the pass returned %d windows, the table holds %d", len(res.Spikes), len(rows))
			}
			for _, w := range res.Spikes {
				if w.PeakUS < 500_000 || w.Score < 1 || w.BaselineUS < 1000 || w.HWClass == "" || !w.Changed || w.DetectorVer != DetectorVersion {
					t.Errorf("window %+v: want a peak near the 1 s stall, score ≥ 1, the baseline, the class, Changed", w)
				}
				if want := float64(w.PeakUS) / math.Max(25_000, 8*w.BaselineUS); math.Abs(w.Score-want) > 1e-6*want {
					t.Errorf("window %s: score %g, want peak / threshold = %g", w.ID, w.Score, want)
				}
			}
			// The ids are the table's own DEFAULT expression.
			if bad := queryRows(t, st, `SELECT count() FROM spikes FINAL WHERE spike_id != lower(hex(cityHash64(service, host, window_start)))`); bad[0][0] != "0" {
				t.Errorf("%s spike ids differ from the table's DEFAULT", bad[0][0])
			}
		})
	}
}

func TestDetectSpikeBaselineIsTheTypicalLatency(t *testing.T) {
	ctx := context.Background()
	st := migrated(t)
	fleetLoad{hosts: 20, seconds: 3600, stall: "h = 3 AND s = 1805"}.insert(t, st)
	res, err := Pass(ctx, st, Config{Service: "billy", From: dataStart, To: sec(3600)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Spikes) != 1 {
		t.Fatalf("want one window, got %+v", res.Spikes)
	}
	w := res.Spikes[0]
	// Lognormal around 4 ms: the weighted median is 4 ms within t-digest error.
	if w.BaselineUS < 3600 || w.BaselineUS > 4400 || w.PeakUS != 1_000_000 || w.HWClass != "gen5" {
		t.Errorf("window %+v: want baseline ≈ 4000 µs, peak 1 s, class gen5", w)
	}
}

func TestDetectSpikeSecondSplitAcrossParts(t *testing.T) {
	ctx := context.Background()
	st := migrated(t)
	// Unmerged parts hold several latency_1s rows of one second: they must
	// count as one second, its max the larger one.
	if err := st.Exec(ctx, "SYSTEM STOP MERGES latency_1s"); err != nil {
		t.Fatal(err)
	}
	fleetLoad{hosts: 20, seconds: 3600, stall: "h = 3 AND s IN (1805, 1807)"}.insert(t, st)
	for _, us := range []int{2_000_000, 1_500_000} {
		if err := st.Exec(ctx, fmt.Sprintf(`INSERT INTO requests (ts, service, host, hw_class, endpoint, latency_us, status, trace_id, span_id, thread_id, weight)
VALUES (fromUnixTimestamp64Micro(%d, 'UTC'), 'billy', %s, 'gen5', '/get', %d, 'OK', '', '', 1003, 1)`,
			sec(1805).UnixMicro()+250_000, store.QuoteString(host(3)), us)); err != nil {
			t.Fatal(err)
		}
	}
	if rows := queryRows(t, st, fmt.Sprintf(`SELECT count() FROM latency_1s WHERE host = %s AND ts = %s`, store.QuoteString(host(3)), secLit(sec(1805)))); rows[0][0] != "3" {
		t.Fatalf("want the second in 3 rows (3 parts), got %s", rows[0][0])
	}
	res, err := Pass(ctx, st, Config{Service: "billy", From: dataStart, To: sec(3600)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Spikes) != 1 {
		t.Fatalf("want one window, got %+v", res.Spikes)
	}
	if w := res.Spikes[0]; w.Host != host(3) || !w.Start.Equal(sec(1805)) || !w.End.Equal(sec(1808)) || w.PeakUS != 2_000_000 {
		t.Errorf("window %+v: want %s [1805, 1808) with the 2 s peak", w, host(3))
	}
}

func TestSpikeScanSeesTheLookbackFleet(t *testing.T) {
	ctx := context.Background()
	st := migrated(t)
	fleetLoad{hosts: 8, seconds: 1200}.insert(t, st)                           // hosts 4–7 are gone before the look-back
	fleetLoad{hosts: 4, seconds: 3600, seed: 1}.insert(t, st)                  // hosts 0–3 stay
	fleetLoad{hosts: 6, seconds: 600, start: sec(3000), seed: 2}.insert(t, st) // hosts 4 and 5 come back inside it
	cfg := Config{Service: "billy", From: dataStart, To: sec(3600), Patterns: PatternConfig{Lookback: 30 * time.Minute}}.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r := newSpikeRange(&cfg)
	if !r.fleetFrom.Equal(sec(1800)) {
		t.Fatalf("fleetFrom = %v, want the look-back's start %v", r.fleetFrom, sec(1800))
	}
	_, got, err := findSpikeWindows(ctx, st, "billy", r, cfg.Spikes)
	if err != nil {
		t.Fatal(err)
	}
	want := &lookbackFleet{dataFrom: sec(1800), hosts: map[string]string{
		host(0): "gen4", host(1): "gen5", host(2): "gen4", host(3): "gen5", host(4): "gen4", host(5): "gen5"}}
	opt := cmp.AllowUnexported(lookbackFleet{})
	if diff := cmp.Diff(want, got, opt); diff != "" {
		t.Errorf("fleet from the spike scan (-want +got):\n%s", diff)
	}
	// What a pass that does not cover the look-back reads instead.
	read, err := fleetOf(ctx, st, "billy", sec(1800), sec(3600))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, read, opt); diff != "" {
		t.Errorf("fleetOf (-want +got):\n%s", diff)
	}
	cfg.From, cfg.Patterns.Lookback = sec(3000), time.Hour
	if r := newSpikeRange(&cfg); !r.fleetFrom.IsZero() {
		t.Errorf("a scan from %v covers the look-back from %v?", r.baseFrom, dataStart)
	}
}

// TestDetectSpikeByShare: a second is slow when a tenth of its requests
// (three or more) took longer than the threshold, though its mean did not
// pass it; a digest's interpolated p90 does not make it so.
func TestDetectSpikeByShare(t *testing.T) {
	ctx := context.Background()
	st := shareFleet(t)
	res, err := Pass(ctx, st, Config{Service: "billy", From: dataStart, To: sec(3600)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Spikes) != 2 {
		t.Fatalf("want two windows (hosts 3 and 9), got %+v", res.Spikes)
	}
	sort.Slice(res.Spikes, func(i, j int) bool { return res.Spikes[i].Host < res.Spikes[j].Host })
	for i, want := range []struct {
		host int
		peak uint32
	}{{3, 130_000}, {9, 94_000}} {
		if w := res.Spikes[i]; w.Host != host(want.host) || !w.Start.Equal(sec(1805)) || w.PeakUS != want.peak {
			t.Errorf("window %+v: want %s at second 1805 with the %d µs peak", w, host(want.host), want.peak)
		}
	}
}

// refusesMaterializedCTE is the real store answering a materialized CTE
// as a server without them does.
type refusesMaterializedCTE struct {
	store.Store
	refused *int
}

func (s refusesMaterializedCTE) Query(ctx context.Context, q string, fn func(store.Block) error, opts ...store.Option) error {
	if strings.Contains(q, "AS MATERIALIZED (") {
		*s.refused++
		return &store.Exception{Code: store.CodeUnknownSetting, Name: "UNKNOWN_SETTING", Message: "Code: 115. DB::Exception: Unknown setting 'enable_materialized_cte'. (UNKNOWN_SETTING)"}
	}
	return s.Store.Query(ctx, q, fn, opts...)
}

// A server without materialized CTEs gets the scan with the CTE inlined,
// which finds the same windows, the share rule's included.
func TestSpikeScanWithoutMaterializedCTE(t *testing.T) {
	ctx := context.Background()
	st := shareFleet(t)
	cfg := Config{Service: "billy", From: dataStart, To: sec(3600)}.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r := newSpikeRange(&cfg)
	want, _, err := findSpikeWindows(ctx, st, "billy", r, cfg.Spikes)
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	got, _, err := findSpikeWindows(ctx, refusesMaterializedCTE{st, &refused}, "billy", r, cfg.Spikes)
	if err != nil {
		t.Fatal(err)
	}
	if refused != 1 {
		t.Errorf("the materialized query was tried %d times, want once", refused)
	}
	if len(want) != 2 || !cmp.Equal(got, want) {
		t.Errorf("inlined CTE: %+v\nmaterialized: %+v (want the two windows of hosts 3 and 9)", got, want)
	}
}

// shareFleet holds twenty hosts of which, at second 1805, hosts 3 and 9
// are slow by the share of their requests over the bar (not by their
// mean), and 5, 7 and 11 have tail requests that are no stall.
func shareFleet(t *testing.T) store.Store {
	t.Helper()
	ctx := context.Background()
	st := migrated(t)
	fleetLoad{hosts: 20, seconds: 3600}.insert(t, st)
	// req is one request of second 1805 on host h.
	req := func(h, us, weight int) string {
		return fmt.Sprintf("(fromUnixTimestamp64Micro(%d, 'UTC'), 'billy', %s, 'gen5', '/get', %d, 'OK', '', '', %d, %d)",
			sec(1805).UnixMicro()+100_000, store.QuoteString(host(h)), us, 1000+h, weight)
	}
	rows := []string{
		// Host 3: the end of a stall split across two seconds. The fast
		// sample carries 30 requests, so six stalled ones lift the mean to
		// ~22 ms, under the 32 ms bar, while the p90 is theirs.
		req(3, 4_000, 30),
		req(3, 120_000, 1), req(3, 125_000, 1), req(3, 130_000, 1), req(3, 118_000, 1), req(3, 122_000, 1), req(3, 127_000, 1),
		// Host 5: two fast samples and one slow request. The digest's p90
		// interpolates most of the way to the slow one: that is no stall.
		req(5, 4_000, 30), req(5, 4_200, 30), req(5, 70_000, 1),
		// Host 11: two fast samples and three tail requests, 3 of 64:
		// the digest's p90 is 80 ms and more, the second's is 4.2 ms.
		req(11, 4_000, 30), req(11, 4_200, 30), req(11, 100_000, 1), req(11, 110_000, 1), req(11, 120_000, 1),
		// Hosts 7 and 9 serve 30 requests a second (a fast sample of 29
		// below), but second 1805 has no fast sample.
		// Host 7: five tail requests. The third slowest of the second's 30
		// is 20 ms: no stall, though the digest's own p90 is the 79 ms one.
		req(7, 16_000, 1), req(7, 18_000, 1), req(7, 20_000, 1), req(7, 30_000, 1), req(7, 79_000, 1),
		// Host 9: a short stall holds five of the second's 30 requests,
		// more than a tenth: the p90 is theirs, while the mean over the
		// second's requests is ~31 ms.
		req(9, 90_000, 1), req(9, 91_000, 1), req(9, 92_000, 1), req(9, 93_000, 1), req(9, 94_000, 1),
	}
	if err := st.Exec(ctx, `INSERT INTO requests (ts, service, host, hw_class, endpoint, latency_us, status, trace_id, span_id, thread_id, weight) VALUES `+strings.Join(rows, ", ")); err != nil {
		t.Fatal(err)
	}
	if err := st.Exec(ctx, fmt.Sprintf(`INSERT INTO requests (ts, service, host, hw_class, endpoint, latency_us, status, trace_id, span_id, thread_id, weight)
SELECT fromUnixTimestamp64Micro(toInt64((%d + intDiv(number, 2)) * 1000000 + 300000), 'UTC'), 'billy',
    if(number %% 2 = 0, %s, %s), 'gen5', '/get', 4000, 'OK', '', '', 1000, 29
FROM numbers(7200) WHERE intDiv(number, 2) != 1805`, dataStart.Unix(), store.QuoteString(host(7)), store.QuoteString(host(9)))); err != nil {
		t.Fatal(err)
	}
	return st
}

func TestDetectSpikeOnALoneHostWithSecondsOfData(t *testing.T) {
	// A host that just came up (the demo's and the e2e's local node): five
	// seconds of data, one stalled at 300 ms. Its spread is no spread: over
	// five seconds, the stalled one would be most of it (a multiplier of
	// ~150 instead of 8).
	ctx := context.Background()
	st := migrated(t)
	fleetLoad{hosts: 1, seconds: 5, stall: "s = 2", stallUS: 300_000}.insert(t, st)
	res, err := Pass(ctx, st, Config{Service: "billy", From: dataStart, To: sec(5)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Spikes) != 1 || !res.Spikes[0].Start.Equal(sec(2)) {
		t.Errorf("want the one stalled second, got %+v", res.Spikes)
	}
}

// TestALoneTailRequestIsNoStallOnAHeavyTailedHost: on a fleet whose body is
// heavy-tailed (lognormal σ = 0.9) at one request a second, a request 30×
// the typical latency alone in a quiet second is the body's own tail, not
// a spike window, though it lifts its second's mean far over the bar; a
// stall of one second holding two or three requests in flight, which all
// finish together at its end, still is one. The same lone request on a
// narrow-bodied fleet is beyond anything its body yields: a window.
func TestALoneTailRequestIsNoStallOnAHeavyTailedHost(t *testing.T) {
	// at is a request on host h starting ms milliseconds after second 1805.
	at := func(h, ms, us int) string {
		return fmt.Sprintf("(fromUnixTimestamp64Micro(%d, 'UTC'), 'billy', %s, %s, '/get', %d, 'OK', '', '', %d, 1)",
			sec(1805).UnixMicro()+int64(ms)*1000, store.QuoteString(host(h)), store.QuoteString([]string{"gen4", "gen5"}[h%2]), us, 1000+h)
	}
	for _, tc := range []struct {
		name  string
		sigma float64
		want  []window
	}{
		{"heavy-tailed body: the lone request is its tail", 0.9, []window{{host(5), 1805, 1807}, {host(7), 1805, 1807}}},
		{"narrow body: the lone request is a spike", 0.25, []window{{host(3), 1805, 1806}, {host(5), 1805, 1807}, {host(7), 1805, 1807}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := migrated(t)
			// Host 3's request of second 1805 takes 120 ms, 30× the typical
			// 4 ms, and nothing else on the host is slow around it.
			fleetLoad{hosts: 20, seconds: 3600, sigma: tc.sigma, stall: "h = 3 AND s = 1805", stallUS: 120_000}.insert(t, st)
			rows := []string{
				// Host 5: a stall from 1805.55 to 1806.5 holds three requests;
				// each second also has the fleet's own request, which began
				// before the stall or after it.
				at(5, 600, 900_000), at(5, 900, 600_000), at(5, 1200, 300_000),
				// Host 7: a stall from 1805.7 to 1806.3 holds two.
				at(7, 700, 600_000), at(7, 1100, 200_000),
			}
			if err := st.Exec(ctx, `INSERT INTO requests (ts, service, host, hw_class, endpoint, latency_us, status, trace_id, span_id, thread_id, weight) VALUES `+strings.Join(rows, ", ")); err != nil {
				t.Fatal(err)
			}
			if _, err := Pass(ctx, st, Config{Service: "billy", From: dataStart, To: sec(3600)}); err != nil {
				t.Fatal(err)
			}
			// Only the windows around second 1805 are judged: the heavy
			// body has tail requests of its own elsewhere.
			var got []window
			for _, w := range windowsOf(readSpikes(t, st, "billy")) {
				if w.End > 1800 && w.Start < 1810 {
					got = append(got, w)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("windows around second 1805 (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTheSpikeRuleComesFromEachHostsOwnTail: a fleet that sends every
// request (weight 1) at 5 a second, on a heavy-tailed body (lognormal σ =
// 0.9): a second holding one tail request among its five has a mean far
// over the bar, which the rule before detect/8 took for a stall (kept
// requests enough not to be thin). Judged by each host's own tail, the
// quiet hour gives no window, while a 1 s stall that holds a second's five
// requests is one.
func TestTheSpikeRuleComesFromEachHostsOwnTail(t *testing.T) {
	ctx := context.Background()
	st := migrated(t)
	fleetLoad{hosts: 30, seconds: 3600, rps: 5, sigma: 0.9, stall: "h = 5 AND s = 2400", stallUS: 800_000, seed: 9}.insert(t, st)
	if _, err := Pass(ctx, st, Config{Service: "billy", From: dataStart, To: sec(3600)}); err != nil {
		t.Fatal(err)
	}
	want := []window{{host(5), 2400, 2401}}
	if diff := cmp.Diff(want, windowsOf(readSpikes(t, st, "billy"))); diff != "" {
		t.Errorf("30 host-hours of a heavy-tailed body with one stall: windows (-want +got):\n%s", diff)
	}
}

// A host a minute old at 100 requests a second has its 2,000 requests,
// but its one stall is 2 in 100 of them: its p99. Judged by that tail
// the stall would have no company over its own bars; it has the fleet's.
// The host rule alone: the endpoint stage finds this fixture's stall too,
// but not the README's own-hosts test's, whose requests are released over
// 1.2 s.
func TestAHostsFirstStallIsNotItsOwnTail(t *testing.T) {
	st := migrated(t)
	fleetLoad{hosts: 2, seconds: 50, rps: 100, stall: "s = 40", stallUS: 700_000, stallJitterUS: 200_000, seed: 3}.insert(t, st)
	want := []window{{host(0), 40, 41}, {host(1), 40, 41}}
	if diff := cmp.Diff(want, hostRuleWindows(t, st, 50)); diff != "" {
		t.Errorf("two hosts 50 s old, both stalled at 40 s: the host rule's windows (-want +got):\n%s", diff)
	}
}

// hostRuleWindows is what the host rule alone (no endpoint stage) finds
// in billy's first seconds of data, one pass.
func hostRuleWindows(t *testing.T, st store.Store, seconds int) []window {
	t.Helper()
	cfg := Config{Service: "billy", From: dataStart, To: sec(seconds)}.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	got, _, err := findSpikeWindows(context.Background(), st, "billy", newSpikeRange(&cfg), cfg.Spikes)
	if err != nil {
		t.Fatal(err)
	}
	var ws []window
	for _, w := range got {
		ws = append(ws, window{w.Host, int(w.Start.Sub(dataStart).Seconds()), int(w.End.Sub(dataStart).Seconds())})
	}
	return ws
}

// The inverse normal the bars are computed with, rendered as SQL and run
// on the engine, against Go's, from the p99 to a tail of 10⁻¹⁰.
func TestNormalQuantileSQLIsWithinItsStatedError(t *testing.T) {
	st := migrated(t)
	for _, s := range []float64{0.5, 0.1, 0.01, 1e-4, 2.8e-7, 1e-10} {
		tab, err := store.Select(context.Background(), st, "SELECT "+normalQuantileSQL(floatLit(s)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := strconv.ParseFloat(tab.Rows[0][0], 64)
		if err != nil {
			t.Fatal(err)
		}
		want := math.Sqrt2 * math.Erfinv(1-2*s)
		if math.Abs(got-want) > 4.5e-4 {
			t.Errorf("z(%g) = %.6f, want %.6f", s, got, want)
		}
	}
}
