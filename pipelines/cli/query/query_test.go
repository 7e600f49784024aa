package query

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// queryFleet is the hand-made detector output the query tests read: service
// billy on five hosts (gen4: h01, h02; gen5: h03–h05), where the gen5 hosts
// stall for a second every ~17 min with softirq time on CPUs 0, 2, 4, and
// one host of another service.
type queryFleet struct {
	dsn string
	t0  time.Time // start of the data; the spikes are 17–51 minutes later
	// stamp is the SQL value of the rows' detected_at, created_at and
	// updated_at: now64(3), or a fixed time for output compared byte for byte.
	stamp string
}

func (f queryFleet) at(d time.Duration) string {
	return f.t0.Add(d).Format("2006-01-02 15:04:05.000")
}

// rangeArgs selects the whole fixture with --from/--to.
func (f queryFleet) rangeArgs() []string {
	return []string{"--from", f.t0.Add(-time.Minute).Format(time.RFC3339), "--to", f.t0.Add(2 * time.Hour).Format(time.RFC3339)}
}

func seedQueryFleet(t *testing.T) queryFleet {
	t.Helper()
	// Two hours back, so that --since 1h sees nothing and --since 3h all.
	return seedQueryFleetAt(t, time.Now().UTC().Truncate(time.Minute).Add(-2*time.Hour), "now64(3)")
}

// seedQueryFleetAt seeds the fleet with its data starting at t0 and the
// rows' detection and update times at stamp (SQL). The tables keep rows for
// ten years, so that a fleet at a fixed date in the past is not expired by
// the requests' TTL.
func seedQueryFleetAt(t *testing.T, t0 time.Time, stamp string) queryFleet {
	t.Helper()
	ctx := context.Background()
	st := testenv.ClickHouse(t)
	const tenYears = 3650
	if _, err := schema.Apply(ctx, st, schema.Options{RequestsTTLDays: tenYears, LatencyTTLDays: tenYears,
		CountersTTLDays: tenYears, DetectionsTTLDays: tenYears, CapturesTTLDays: tenYears}); err != nil {
		t.Fatal(err)
	}
	f := queryFleet{dsn: "chdb://" + st.Dir() + "?database=" + st.Database(), t0: t0, stamp: stamp}
	var req []string
	for i, h := range []string{"h01", "h02", "h03", "h04", "h05", "o1"} {
		svc, class := "billy", []string{"gen4", "gen4", "gen5", "gen5", "gen5", "gen4"}[i]
		if h == "o1" {
			svc = "other"
		}
		for k := 0; k < 10; k++ {
			us, w := 4000+100*k, 10
			if k == 9 && (h == "h03" || h == "h04" || h == "h05") {
				us, w = 1_000_000, 1
			}
			req = append(req, fmt.Sprintf("('%s', '%s', '%s', '%s', '/get', %d, 'OK', 7, %d)",
				f.at(5*time.Minute+time.Duration(k)*time.Second), svc, h, class, us, w))
		}
	}
	exec := func(q string) {
		t.Helper()
		if err := st.Exec(ctx, q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	exec("INSERT INTO requests (ts, service, host, hw_class, endpoint, latency_us, status, thread_id, weight) VALUES " + strings.Join(req, ", "))

	type spike struct {
		id, host, class string
		at              time.Duration
		peakUS          int
		deleted         int
	}
	spikes := []spike{
		{"s-h03-1", "h03", "gen5", 17 * time.Minute, 1_000_000, 0},
		{"s-h03-2", "h03", "gen5", 34 * time.Minute, 1_010_000, 0},
		{"s-h03-3", "h03", "gen5", 51 * time.Minute, 990_000, 0},
		{"s-h04-1", "h04", "gen5", 20 * time.Minute, 1_200_000, 0},
		{"s-h04-2", "h04", "gen5", 40 * time.Minute, 1_200_000, 0},
		{"s-h05-1", "h05", "gen5", 45 * time.Minute, 950_000, 0},
		// A window a re-run retracted: no command may show it.
		{"s-h01-x", "h01", "gen4", 10 * time.Minute, 2_000_000, 1},
	}
	var sp, sus []string
	for _, s := range spikes {
		sp = append(sp, fmt.Sprintf("('%s', 'billy', '%s', '%s', '%s', '%s', %d, 5000, %f, 'v1', %s, %d)",
			s.id, s.host, s.class, f.at(s.at), f.at(s.at+2*time.Second), s.peakUS, float64(s.peakUS)/25000, f.stamp, s.deleted))
		add := func(rank int, metric string, cpu int, device, mode string, base, during float64) {
			sus = append(sus, fmt.Sprintf("('%s', 'billy', '%s', '%s', %d, '%s', %d, '%s', '%s', %g, %g, %g, 'v1', %s)",
				s.id, s.host, f.at(s.at), rank, metric, cpu, device, mode, base, during, during/base, f.stamp))
		}
		switch s.host {
		case "h03":
			add(1, "system.cpu.time", 0, "", "softirq", 0.02, 0.95)
			add(2, "system.cpu.time", 2, "", "softirq", 0.02, 0.9)
			add(3, "system.cpu.time", 4, "", "softirq", 0.03, 0.8)
			add(4, "spikehunt.interrupts", 0, "eth0", "", 1000, 9000)
		case "h04":
			add(1, "system.cpu.time", 2, "", "softirq", 0.02, 0.9)
			add(2, "system.cpu.time", 0, "", "softirq", 0.02, 0.7)
		case "h05":
			add(1, "spikehunt.network.pause_frames", -1, "eth1", "receive", 1, 400)
		}
	}
	exec(`INSERT INTO spikes (spike_id, service, host, hw_class, window_start, window_end, peak_us, baseline_us, score,
		detector_version, detected_at, is_deleted) VALUES ` + strings.Join(sp, ", "))
	exec(`INSERT INTO spike_suspects (spike_id, service, host, window_start, rank, metric, cpu, device, mode, baseline,
		during, deviation, detector_version, detected_at) VALUES ` + strings.Join(sus, ", "))
	exec(fmt.Sprintf(`INSERT INTO captures (capture_id, host, node, backend, profile, window_start, window_end, trigger,
		spike_ids, uri, bytes, lost_events, checksum, status, created_at, updated_at)
		VALUES ('c1', 'h03', 'node-3', 'perf', 'cpu', '%s', '%s', 'local threshold', ['s-h03-1'], 'file:///c1', 1, 0, 'x', 'indexed', %s, %s)`,
		f.at(17*time.Minute-10*time.Second), f.at(17*time.Minute+10*time.Second), f.stamp, f.stamp))
	// Two versions of one pattern (the latest wins) and a retracted one.
	pattern := func(id, class string, end time.Duration, affected int, deleted int) string {
		return fmt.Sprintf(`('%s', 'billy', '%s', ['hw-class-skewed'], '%s', '%s', %d, 5, 1020, 0.9, 0.05,
			{'gen5': 1.4, 'gen4': 0.6667}, 0.4,
			[('system.cpu.time', 'softirq', '', 3, 4.5), ('spikehunt.network.pause_frames', 'receive', 'eth1', 1, 1.2)],
			'v1', %s, %d)`, id, class, f.at(end-time.Hour), f.at(end), affected, f.stamp, deleted)
	}
	exec(`INSERT INTO patterns (pattern_id, service, class, modifiers, lookback_start, lookback_end, hosts_affected,
		hosts_total, recurrence_interval_s, regularity, synchronicity, hw_class_skew, illusion_share, suspects,
		detector_version, detected_at, is_deleted) VALUES ` + strings.Join([]string{
		pattern("p-rec", "fleet-recurrent", 30*time.Minute, 2, 0),
		pattern("p-rec", "fleet-recurrent", 60*time.Minute, 3, 0),
		pattern("p-sync", "fleet-synchronized", 60*time.Minute, 5, 1),
	}, ", "))
	return f
}

// cli runs spikehunt with args and fails the test unless it exits with code.
func cli(t *testing.T, code int, args ...string) (stdout, stderr string) {
	t.Helper()
	got, out, errs := runCLI(t, args...)
	if got != code {
		t.Fatalf("spikehunt %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), got, code, out, errs)
	}
	return out, errs
}

// unmarshalRows decodes the rows of -o json's output into v.
func unmarshalRows(b []byte, v any) error {
	return json.Unmarshal(b, &struct {
		Rows any `json:"rows"`
	}{Rows: v})
}

// emptyRows reports whether -o json's output has no rows.
func emptyRows(out string) bool {
	var rows []json.RawMessage
	return unmarshalRows([]byte(out), &rows) == nil && rows != nil && len(rows) == 0
}

// spikeRows returns the rows of a spikes table, without its SPIKE column,
// whose first column then matches first.
func spikeRows(out, first string) [][]string {
	var rows [][]string
	re := regexp.MustCompile(`^` + first + `$`)
	for _, r := range tableRows(out, `s-\S+`) {
		if len(r) > 1 && re.MatchString(r[1]) {
			rows = append(rows, r[1:])
		}
	}
	return rows
}

// tableRows returns the lines of a table whose first column matches first.
func tableRows(out, first string) [][]string {
	var rows [][]string
	re := regexp.MustCompile(`^` + first + `\s`)
	for _, line := range strings.Split(out, "\n") {
		if re.MatchString(line) {
			rows = append(rows, regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1))
		}
	}
	return rows
}

func TestQueryCommands(t *testing.T) {
	f := seedQueryFleet(t)
	billy := append([]string{"--dsn", f.dsn, "--service", "billy"}, f.rangeArgs()...)
	with := func(cmd string, base []string, extra ...string) []string {
		return append(append([]string{cmd}, base...), extra...)
	}

	t.Run("spikes lists each window with its top suspect and the share of hosts", func(t *testing.T) {
		out, _ := cli(t, 0, with("spikes", billy)...)
		rows := spikeRows(out, "h0[0-9]")
		var got []string
		for _, r := range rows {
			got = append(got, r[0]+" "+r[1]+" "+r[3]+" "+r[4]+" "+r[6])
		}
		want := []string{
			"h03 gen5 2s 990 softirq cpu 0,2,4",
			"h05 gen5 2s 950 network.pause_frames receive eth1",
			"h04 gen5 2s 1200 softirq cpu 0,2",
			"h03 gen5 2s 1010 softirq cpu 0,2,4",
			"h04 gen5 2s 1200 softirq cpu 0,2",
			"h03 gen5 2s 1000 softirq cpu 0,2,4",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("spike rows (-want +got):\n%s\n%s", diff, out)
		}
		if !strings.Contains(out, "\n6 spike windows on 3 of 5 hosts (60%) for service billy between ") {
			t.Errorf("summary missing:\n%s", out)
		}
		if strings.Contains(out, "SERVICE") {
			t.Errorf("a --service listing repeats the service column:\n%s", out)
		}
	})

	t.Run("spikes --host keeps one host", func(t *testing.T) {
		out, _ := cli(t, 0, with("spikes", billy, "--host", "h03")...)
		if n := len(spikeRows(out, "h0[0-9]")); n != 3 || len(spikeRows(out, "h03")) != 3 {
			t.Errorf("want the 3 windows of h03:\n%s", out)
		}
		if !strings.Contains(out, "3 spike windows for service billy on host h03 between") {
			t.Errorf("summary:\n%s", out)
		}
	})

	t.Run("spikes --without-captures leaves out the captured window", func(t *testing.T) {
		out, _ := cli(t, 0, with("spikes", billy, "--without-captures", "-o", "json")...)
		var got []spikeView
		if err := unmarshalRows([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range got {
			ids = append(ids, s.SpikeID)
		}
		sort.Strings(ids)
		if diff := cmp.Diff([]string{"s-h03-2", "s-h03-3", "s-h04-1", "s-h04-2", "s-h05-1"}, ids); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		out, _ = cli(t, 0, with("spikes", billy, "--without-captures", "--host", "h03")...)
		if !strings.Contains(out, "2 spike windows without captures for service billy on host h03") {
			t.Errorf("summary:\n%s", out)
		}
	})

	t.Run("spikes as JSON: stable snake_case keys", func(t *testing.T) {
		out, _ := cli(t, 0, with("spikes", billy, "--host", "h03", "--limit", "1", "-o", "json")...)
		var got []map[string]any
		if err := unmarshalRows([]byte(out), &got); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if len(got) != 1 {
			t.Fatalf("--limit 1: %d rows", len(got))
		}
		var keys []string
		for k := range got[0] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		wantKeys := []string{"baseline_ms", "detector_version", "duration_s", "host", "hw_class", "peak_ms", "score",
			"service", "spike_id", "top_suspect", "window_end", "window_start"}
		if diff := cmp.Diff(wantKeys, keys); diff != "" {
			t.Errorf("keys (-want +got):\n%s", diff)
		}
		s := got[0]
		if s["spike_id"] != "s-h03-3" || s["peak_ms"] != 990.0 || s["duration_s"] != 2.0 || s["window_start"] != f.t0.Add(51*time.Minute).Format(time.RFC3339) {
			t.Errorf("row: %v", s)
		}
		top := s["top_suspect"].(map[string]any)
		if top["metric"] != "system.cpu.time" || top["mode"] != "softirq" || fmt.Sprint(top["cpus"]) != "[0 2 4]" {
			t.Errorf("top suspect: %v", top)
		}
	})

	t.Run("spikes --since counts back from now", func(t *testing.T) {
		out, _ := cli(t, 0, "spikes", "--dsn", f.dsn, "--service", "billy", "--since", "1h")
		if strings.TrimSpace(out) != "no spikes for service billy since 1h" {
			t.Errorf("want the empty line, got:\n%s", out)
		}
		out, _ = cli(t, 0, "spikes", "--dsn", f.dsn, "--since", "3h")
		if len(spikeRows(out, "billy")) != 6 || !strings.HasPrefix(out, "SPIKE    SERVICE") {
			t.Errorf("want 6 billy rows with a service column:\n%s", out)
		}
	})

	t.Run("empty results say so, in JSON as no rows and the sentence", func(t *testing.T) {
		for _, tc := range []struct {
			args             []string
			stdout, inStderr string
		}{
			{with("spikes", []string{"--dsn", f.dsn, "--service", "nobody"}), "no spikes for service nobody since 6h\n", ""},
			{with("hosts", []string{"--dsn", f.dsn, "--since", "10m"}), "no hosts for any service since 10m\n", ""},
			{with("patterns", billy, "--host", "h01"), "no patterns for service billy on host h01 between " + f.t0.Add(-time.Minute).Format(time.RFC3339) + " and " + f.t0.Add(2*time.Hour).Format(time.RFC3339) + "\n", ""},
		} {
			out, errs := cli(t, 0, tc.args...)
			if out != tc.stdout || !strings.Contains(errs, tc.inStderr) {
				t.Errorf("spikehunt %v:\nstdout %q, want %q\nstderr %q, want it to contain %q", tc.args, out, tc.stdout, errs, tc.inStderr)
			}
			out, errs = cli(t, 0, append(tc.args, "-o", "json")...)
			var o Output
			if err := json.Unmarshal([]byte(out), &o); err != nil || !emptyRows(out) ||
				!slices.Equal(o.Summary.Lines, []string{strings.TrimSpace(tc.stdout)}) || strings.TrimSpace(errs) != strings.TrimSpace(tc.stdout) {
				t.Errorf("spikehunt %v -o json:\nstdout %s\nstderr %q; want no rows and the sentence in summary.lines and on stderr", tc.args, out, errs)
			}
		}
	})

	t.Run("patterns shows the latest version and says it in a sentence", func(t *testing.T) {
		out, _ := cli(t, 0, with("patterns", billy)...)
		rows := tableRows(out, `fleet-\S+`)
		if len(rows) != 1 {
			t.Fatalf("want one pattern (the retracted one hidden):\n%s", out)
		}
		want := []string{"fleet-recurrent", "hw-class-skewed", "3/5 (60%)", "~17m", "0.90", "0.05", "gen5 2.1×", "40%",
			"softirq cpu 0,2,4 (3 hosts), network.pause_frames receive eth1 (1 host)"}
		if diff := cmp.Diff(want, rows[0]); diff != "" {
			t.Errorf("row (-want +got):\n%s\n%s", diff, out)
		}
		sentence := "Most hosts stall every ~17 min, each at its own phase; the slowest request of a stall takes ~1.0 s (median over the pattern's stalls; up to ~1.2 s); 60% of hosts; 2.1× as often on hw class gen5; softirq: CPUs 0, 2 and 4 at ~90% during the stalls (baseline 2.0%)."
		if !strings.Contains(out, "\n\n"+sentence+"\n") {
			t.Errorf("sentence missing under the table:\n%s", out)
		}

		out, _ = cli(t, 0, with("patterns", billy, "-o", "json")...)
		var got []Pattern
		if err := unmarshalRows([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].HostsAffected != 3 || !got[0].LookbackEnd.Equal(f.t0.Add(time.Hour)) ||
			got[0].Description != sentence || got[0].HWClassSkew["gen5"] != 1.4 || got[0].TypicalPeakMS != 1010 ||
			fmt.Sprint(got[0].Suspects[0].CPUs) != "[0 2 4]" || got[0].TopHosts[0] != "h03" {
			t.Errorf("json: %+v", got)
		}
		out, _ = cli(t, 0, with("patterns", billy, "--host", "h04")...)
		if len(tableRows(out, `fleet-\S+`)) != 1 {
			t.Errorf("h04 takes part in billy's pattern:\n%s", out)
		}
	})

	t.Run("hosts sorts by spikes and says how many hosts had any", func(t *testing.T) {
		out, _ := cli(t, 0, with("hosts", billy)...)
		rows := tableRows(out, "h0[0-9]")
		var got []string
		for _, r := range rows {
			got = append(got, strings.Join([]string{r[0], r[1], r[2], r[5], r[6]}, " "))
		}
		want := []string{"h03 gen5 91 1000 3", "h04 gen5 91 1000 2", "h05 gen5 91 1000 1", "h01 gen4 100 4.9 0", "h02 gen4 100 4.9 0"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("host rows (-want +got):\n%s\n%s", diff, out)
		}
		if !strings.Contains(out, "\n3 of 5 hosts had spikes (60%); median 2 spikes per affected host\n") {
			t.Errorf("summary:\n%s", out)
		}

		out, _ = cli(t, 0, with("hosts", billy, "--host", "h04", "-o", "json")...)
		var hosts []Host
		if err := unmarshalRows([]byte(out), &hosts); err != nil {
			t.Fatal(err)
		}
		if len(hosts) != 1 || hosts[0].Host != "h04" || hosts[0].Requests != 91 || hosts[0].Spikes != 2 ||
			hosts[0].MaxMS != 1000 || hosts[0].P50MS < 4 || hosts[0].P50MS > 5 ||
			!hosts[0].LastSpike.Equal(f.t0.Add(40*time.Minute)) {
			t.Errorf("json: %+v", hosts)
		}

		out, _ = cli(t, 0, "hosts", "--dsn", f.dsn, "--since", "3h", "--limit", "2")
		if !strings.Contains(out, "showing 2 of 6 hosts") || !strings.Contains(out, "billy: 3 of 5 hosts had spikes") ||
			!strings.Contains(out, "other: 0 of 1 hosts had spikes (0%)") {
			t.Errorf("all services:\n%s", out)
		}
	})

	t.Run("suspects ranks each spike's counters and counts the top suspects", func(t *testing.T) {
		out, _ := cli(t, 0, with("suspects", billy, "--host", "h03", "--limit", "1")...)
		if !strings.Contains(out, "h03   "+f.t0.Add(51*time.Minute).Format("2006-01-02 15:04:05")) {
			t.Errorf("spike header row:\n%s", out)
		}
		if n := strings.Count(out, "system.cpu.time"); n != 3+1 { // 3 ranks + the family table
			t.Errorf("want 3 ranked softirq rows and one family row, got %d:\n%s", n, out)
		}
		if !strings.Contains(out, "Across the 3 spike windows for service billy on host h03") {
			t.Errorf("family header:\n%s", out)
		}

		if strings.Contains(out, "No kernel counter moved") {
			t.Errorf("softirq is first in 3 of h03's 3 windows, yet:\n%s", out)
		}
		// Two windows, each with another top suspect: no counter moved
		// with most of them.
		out, _ = cli(t, 0, "suspects", "--dsn", f.dsn, "--service", "billy", "--from", f.t0.Add(39*time.Minute).Format(time.RFC3339),
			"--to", f.t0.Add(46*time.Minute).Format(time.RFC3339))
		if !strings.Contains(out, "No kernel counter moved with most of these stalls: none is the top suspect in more than half of the 2 windows") {
			t.Errorf("two windows, two top suspects:\n%s", out)
		}

		out, _ = cli(t, 0, "suspects", "--dsn", f.dsn, "--spike", "s-h04-1", "-o", "json")
		var got []suspectView
		if err := unmarshalRows([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Rank != 1 || got[0].CPU != 2 || got[0].During != 0.9 || got[1].CPU != 0 {
			t.Errorf("s-h04-1: %+v", got)
		}

		out, _ = cli(t, 0, with("suspects", billy, "--aggregate", "-o", "json")...)
		var fams []suspectFamilyView
		if err := unmarshalRows([]byte(out), &fams); err != nil {
			t.Fatal(err)
		}
		want := []suspectFamilyView{
			{Metric: "system.cpu.time", Mode: "softirq", CPUs: []int{0, 2, 4}, Rank1Spikes: 5, Spikes: 5, Hosts: 2, TotalSpikes: 6},
			{Metric: "spikehunt.network.pause_frames", Mode: "receive", Device: "eth1", CPUs: []int{}, Rank1Spikes: 1, Spikes: 1, Hosts: 1, TotalSpikes: 6},
			{Metric: "spikehunt.interrupts", Device: "eth0", CPUs: []int{0}, Rank1Spikes: 0, Spikes: 3, Hosts: 1, TotalSpikes: 6},
		}
		if diff := cmp.Diff(want, fams); diff != "" {
			t.Errorf("families (-want +got):\n%s", diff)
		}
	})

	t.Run("a store error is one line", func(t *testing.T) {
		// A database the schema was never applied to.
		dsn := "chdb://" + testenv.ClickHouseDir() + "?database=t_query_unmigrated"
		_, errs := cli(t, 1, "spikes", "--dsn", dsn)
		// The fleet's database holds a store: the hint is that one.
		if strings.Count(strings.TrimSpace(errs), "\n") != 0 || !strings.Contains(errs, "use --dsn 'chdb://") {
			t.Errorf("want one line with a hint, got %q", errs)
		}
	})
}

func TestQueryFlagMistakes(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		inStderr string
	}{
		{[]string{"spikes"}, "--dsn is required"},
		{[]string{"spikes", "--dsn", "chdb:///x", "-o", "yaml"}, `-o must be table or json, not "yaml"`},
		{[]string{"patterns", "--dsn", "chdb:///x", "--since", "-1h"}, "must be positive"},
		{[]string{"hosts", "--dsn", "chdb:///x", "--since", "soon"}, "want a duration such as 90s, 30m, 36h or 7d"},
		{[]string{"spikes", "--dsn", "chdb:///x", "--from", "yesterday"}, "want an RFC 3339 time such as"},
		{[]string{"spikes", "--dsn", "chdb:///x", "--from", "2025-01-02T00:00:00Z", "--to", "2025-01-01T00:00:00Z"}, "is not before --to"}, // fixed date: flag validation, nothing is read
		{[]string{"spikes", "--dsn", "chdb:///x", "--from", "2025-01-01T00:00:00Z", "--since", "1h"}, "either --since or --from"},          // fixed date: flag validation, nothing is read
		{[]string{"suspects", "--dsn", "chdb:///x", "--limit", "-1"}, "--limit must be 0"},
		{[]string{"suspects", "--dsn", "chdb:///x", "--spike", "a", "--aggregate"}, "does not go with --spike"},
		{[]string{"spikes", "--dsn", "chdb:///x", "--sinc", "1h"}, "unknown flag --sinc; did you mean --since?"},
		{[]string{"spikes", "--dsn", "chdb:///x", "--limit", "many"}, `invalid value "many" for flag --limit`},
		{[]string{"spikes", "--dsn"}, "flag needs an argument: --dsn"},
		{[]string{"hosts", "--dsn", "chdb:///x", "extra"}, `unexpected argument "extra"`},
	} {
		code, out, errs := runCLI(t, tc.args...)
		// The mistake and where the help is, in two lines: the usage
		// would scroll the mistake away.
		lines := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
		if code != 2 || len(lines) != 2 || !strings.Contains(lines[0], tc.inStderr) ||
			lines[1] != "run 'spikehunt "+tc.args[0]+" -h' for help" || out != "" {
			t.Errorf("spikehunt %v: exit %d, stderr %q; want exit 2, %q and where the help is", tc.args, code, errs, tc.inStderr)
		}
	}
}

func TestPatternsDescribeInOneSentence(t *testing.T) {
	netRX := []PatternSuspect{{Metric: "spikehunt.softirqs", Mode: "NET_RX", CPUs: []int{0, 2, 4, 6}, Hosts: 48, Score: 5}}
	for _, tc := range []struct {
		name string
		p    Pattern
		want string
	}{
		{
			name: "the thousand spikes: every host at its own phase, more on new hardware",
			p: Pattern{Class: "fleet-recurrent", Modifiers: []string{"hw-class-skewed"}, HostsAffected: 48, HostsTotal: 50,
				RecurrenceIntervalS: 1020, HWClassSkew: map[string]float64{"gen4": 0.65, "gen5": 1.365}, TypicalPeakMS: 1012, Suspects: netRX},
			want: "Every host stalls every ~17 min at its own phase; the slowest request of a stall takes ~1.0 s (median over the pattern's stalls); 96% of hosts; 2.1× as often on hw class gen5; during the stalls NET_RX softirq rises on CPUs 0, 2, 4 and 6.",
		},
		{
			name: "a skew map without the modifier is not mentioned",
			p: Pattern{Class: "fleet-recurrent", HostsAffected: 30, HostsTotal: 50, RecurrenceIntervalS: 45,
				HWClassSkew: map[string]float64{"gen5": 1.1}, TypicalPeakMS: 350},
			want: "Most hosts stall every ~45 s, each at its own phase; the slowest request of a stall takes ~350 ms (median over the pattern's stalls); 60% of hosts; no kernel counter moved with the stalls.",
		},
		{
			name: "one named host",
			p: Pattern{Class: "isolated-host", HostsAffected: 1, HostsTotal: 50, RecurrenceIntervalS: 300, TypicalPeakMS: 2500,
				TopHosts: []string{"web-07"}, Suspects: []PatternSuspect{{Metric: "spikehunt.network.pause_frames", Device: "eth0", Mode: "receive", CPUs: []int{}}}},
			want: "Only host web-07 stalls every ~5 min; the slowest request of a stall takes ~2.5 s (median over the pattern's stalls); 1 of 50 hosts; during the stalls pause frames on eth0 rises.",
		},
		{
			name: "a few hosts, named",
			p: Pattern{Class: "isolated-host", HostsAffected: 2, HostsTotal: 50, TopHosts: []string{"a", "b"},
				Suspects: []PatternSuspect{{Metric: "spikehunt.interrupts", Device: "eth0-TxRx-0", CPUs: []int{3}}}},
			want: "Only hosts a and b stall; 2 of 50 hosts; during the stalls interrupts of eth0-TxRx-0 rises on CPU 3.",
		},
		{
			name: "synchronized, many CPUs",
			p: Pattern{Class: "fleet-synchronized", HostsAffected: 40, HostsTotal: 50, RecurrenceIntervalS: 7200, TypicalPeakMS: 800,
				Suspects: []PatternSuspect{{Metric: "system.cpu.time", Mode: "irq", CPUs: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}}}},
			want: "Hosts stall at the same moments every ~2 h; the slowest request of a stall takes ~800 ms (median over the pattern's stalls); 80% of hosts; during the stalls irq CPU time rises on 10 CPUs.",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := describePattern(tc.p); got != tc.want {
				t.Errorf("describePattern:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestQueryFrequentCPUsKeepsTheRegulars(t *testing.T) {
	got := frequentCPUs([]cpuCount{{6, 9}, {0, 10}, {5, 1}, {2, 8}, {4, 5}, {-1, 30}})
	if !slices.Equal(got, []int{0, 2, 4, 6}) {
		t.Errorf("got %v", got)
	}
}

// The query commands must not need the store for --help.
func TestQueryHelpNeedsNoStore(t *testing.T) {
	for _, c := range []string{"spikes", "patterns", "hosts", "suspects"} {
		code, _, errs := runCLI(t, c, "-h")
		if code != 0 || !strings.Contains(errs, "-without-captures") && c == "spikes" || !strings.Contains(errs, "-since") {
			t.Errorf("%s -h: exit %d\n%s", c, code, errs)
		}
	}
}
