package query

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/spikehunt/spikehunt/internal/captures"
	"github.com/spikehunt/spikehunt/internal/store"
)

// seedCaptures adds captures rows to the query fleet, next to its c1 (h03,
// over s-h03-1): c5, a second capture of the same stall; c2 on h04 over
// s-h04-1, with lost events; c3, bait on h01 that caught no spike. It
// returns a store on the fleet's database.
func seedCaptures(t *testing.T, f queryFleet) store.Store {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	row := func(id, host, backend, profile string, from, to time.Duration, spikes string, bytes, lost int) string {
		return fmt.Sprintf("('%s', '%s', 'node-%s', '%s', '%s', '%s', '%s', 'fleet alert', %s, 's3://captures/%s', %d, %d, 'sha256:%s', 'indexed', %s, %s)",
			id, host, host, backend, profile, f.at(from), f.at(to), spikes, id, bytes, lost, id, f.stamp, f.stamp)
	}
	q := `INSERT INTO captures (capture_id, host, node, backend, profile, window_start, window_end, trigger,
		spike_ids, uri, bytes, lost_events, checksum, status, created_at, updated_at) VALUES ` + strings.Join([]string{
		row("c5", "h03", "ftrace", "sched", 17*time.Minute-5*time.Second, 17*time.Minute+5*time.Second, "['s-h03-1']", 2048, 0),
		row("c3", "h01", "perf", "cpu", 30*time.Minute, 30*time.Minute+20*time.Second, "[]", 900, 0),
	}, ", ")
	// c2 with the findings of the node's analysis.
	q2 := `INSERT INTO captures (capture_id, host, node, backend, profile, window_start, window_end, trigger,
		spike_ids, uri, bytes, lost_events, checksum, status, created_at, updated_at, verdict, blocking_stack, hottest_cpu, softirq_share) VALUES ` +
		strings.TrimSuffix(row("c2", "h04", "perf", "offcpu", 20*time.Minute-30*time.Second, 20*time.Minute+30*time.Second, "['s-h04-1']", 7<<19, 12), ")") +
		`, '` + c2Verdict + `', 'do_nanosleep ← hrtimer_nanosleep', 4, 0.25)`
	for _, q := range []string{q, q2} {
		if err := st.Exec(ctx, q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	return st
}

// c2Verdict is the analysis's verdict on c2, longer than the table shows.
const c2Verdict = "blocked 998 ms in do_nanosleep (stack do_nanosleep ← hrtimer_nanosleep ← __x64_sys_nanosleep); woken by its timer; 1.00 s of the request on web[4242]"

func TestCapturesCommand(t *testing.T) {
	f := seedQueryFleet(t)
	st := seedCaptures(t, f)
	dsn := []string{"--dsn", f.dsn}
	all := append(append([]string{}, dsn...), f.rangeArgs()...)
	args := func(base []string, extra ...string) []string {
		return append(append([]string{"captures"}, base...), extra...)
	}
	ids := func(rows [][]string) []string {
		var out []string
		for _, r := range rows {
			out = append(out, r[0])
		}
		return out
	}
	s0301 := utcTime(f.t0.Add(17 * time.Minute))

	t.Run("captures --spike lists every capture of the stall, newest first", func(t *testing.T) {
		out, _ := cli(t, 0, args(dsn, "--spike", "s-h03-1")...)
		if !strings.HasPrefix(out, "CAPTURE  ") {
			t.Errorf("no header:\n%s", out)
		}
		got := tableRows(out, "c[0-9]")
		want := [][]string{
			{"c5", "h03", "ftrace/sched", utcTime(f.t0.Add(17*time.Minute - 5*time.Second)), "10s", "1", "2 KiB", "0"},
			{"c1", "h03", "perf/cpu", utcTime(f.t0.Add(17*time.Minute - 10*time.Second)), "20s", "1", "1 B", "0"},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("rows (-want +got):\n%s\n%s", diff, out)
		}
		if line := "\n2 captures of spike s-h03-1 (billy on h03 at " + s0301 + ", 2s)\n"; !strings.Contains(out, line) {
			t.Errorf("want the line %q:\n%s", line, out)
		}
	})

	t.Run("captures --spike shows the analysis's verdict whole under the table, wrapped", func(t *testing.T) {
		out, _ := cli(t, 0, args(dsn, "--spike", "s-h04-1")...)
		i := strings.Index(out, "\n  c2: ")
		if i < 0 {
			t.Fatalf("no verdict under the table:\n%s", out)
		}
		end := strings.Index(out[i+1:], "\n\n")
		if got := strings.Join(strings.Fields(out[i:i+1+end]), " "); got != "c2: "+strings.Join(strings.Fields(c2Verdict), " ") {
			t.Errorf("verdict %q, want c2's whole:\n%s", got, out)
		}
	})

	t.Run("captures --spike as JSON: every column, stable keys", func(t *testing.T) {
		out, _ := cli(t, 0, args(dsn, "--spike", "s-h04-1", "-o", "json")...)
		var got []captureView
		if err := unmarshalRows([]byte(out), &got); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		want := []captureView{{
			CaptureID: "c2", Host: "h04", Node: "node-h04", Backend: "perf", Profile: "offcpu",
			WindowStart: f.t0.Add(20*time.Minute - 30*time.Second), WindowEnd: f.t0.Add(20*time.Minute + 30*time.Second),
			DurationS: 60, Trigger: "fleet alert", SpikeIDs: []string{"s-h04-1"}, URI: "s3://captures/c2",
			Bytes: 7 << 19, LostEvents: 12, Checksum: "sha256:c2", Status: "indexed",
			Verdict: c2Verdict, BlockingStack: "do_nanosleep ← hrtimer_nanosleep", HottestCPU: 4, SoftirqShare: 0.25,
		}}
		if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(captureView{}, "UpdatedAt")); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		var keys []map[string]any
		if err := unmarshalRows([]byte(out), &keys); err != nil {
			t.Fatal(err)
		}
		var names []string
		for k := range keys[0] {
			names = append(names, k)
		}
		sort.Strings(names)
		wantKeys := []string{"backend", "blocking_stack", "bytes", "capture_id", "checksum", "duration_s", "host", "hottest_cpu", "lost_events", "node",
			"profile", "softirq_share", "spike_ids", "status", "trigger", "updated_at", "uri", "verdict", "window_end", "window_start"}
		if diff := cmp.Diff(wantKeys, names); diff != "" {
			t.Errorf("keys (-want +got):\n%s", diff)
		}
	})

	t.Run("captures over a range: every capture, counted, losses called out", func(t *testing.T) {
		out, _ := cli(t, 0, args(all)...)
		if diff := cmp.Diff([]string{"c3", "c2", "c5", "c1"}, ids(tableRows(out, "c[0-9]"))); diff != "" {
			t.Errorf("rows (-want +got):\n%s\n%s", diff, out)
		}
		if row := tableRows(out, "c2"); len(row) != 1 || row[0][6] != "3.5 MiB" || row[0][7] != "12" {
			t.Errorf("c2's size and lost events:\n%s", out)
		}
		if !strings.Contains(out, "\n4 captures on 3 hosts covering 2 spike windows between ") || !strings.Contains(out, "; 1 with lost events\n") {
			t.Errorf("summary:\n%s", out)
		}
		out, _ = cli(t, 0, args(all, "--limit", "1")...)
		if len(tableRows(out, "c[0-9]")) != 1 || !strings.Contains(out, "; showing the latest 1 (--limit)") {
			t.Errorf("--limit 1:\n%s", out)
		}
	})

	t.Run("captures --service keeps those overlapping that service's spikes, --host one host", func(t *testing.T) {
		out, _ := cli(t, 0, args(all, "--service", "billy", "-o", "json")...)
		var got []captureView
		if err := unmarshalRows([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		var gotIDs []string
		for _, c := range got {
			gotIDs = append(gotIDs, c.CaptureID)
		}
		if diff := cmp.Diff([]string{"c2", "c5", "c1"}, gotIDs); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		out, _ = cli(t, 0, args(all, "--host", "h01")...)
		if diff := cmp.Diff([]string{"c3"}, ids(tableRows(out, "c[0-9]"))); diff != "" {
			t.Errorf("--host h01 (-want +got):\n%s\n%s", diff, out)
		}
		if !strings.Contains(out, "\n1 capture covering 0 spike windows on host h01 between ") {
			t.Errorf("summary:\n%s", out)
		}
	})

	t.Run("no captures say so, in JSON as an empty array", func(t *testing.T) {
		out, _ := cli(t, 0, args(all, "--service", "other")...)
		if !strings.HasPrefix(out, "no captures for service other between ") {
			t.Errorf("got:\n%s", out)
		}
		out, errs := cli(t, 0, args(dsn, "--spike", "s-h05-1", "-o", "json")...)
		if !emptyRows(out) || !strings.Contains(errs, "no captures of spike s-h05-1 (billy on h05 at ") {
			t.Errorf("stdout %q, stderr %q", out, errs)
		}

	})

	t.Run("deleted captures leave both directions", func(t *testing.T) {
		// Retention deletes capture rows with captures.Delete, as the
		// operator does: one capture of s-h03-1 goes, then the other.
		billy := append([]string{"spikes", "--dsn", f.dsn, "--service", "billy", "--without-captures"}, f.rangeArgs()...)
		if err := captures.Delete(context.Background(), st, "c1"); err != nil {
			t.Fatal(err)
		}
		out, _ := cli(t, 0, args(dsn, "--spike", "s-h03-1")...)
		if diff := cmp.Diff([]string{"c5"}, ids(tableRows(out, "c[0-9]"))); diff != "" {
			t.Errorf("after deleting c1 (-want +got):\n%s\n%s", diff, out)
		}
		if out, _ := cli(t, 0, append(billy, "--host", "h03")...); len(spikeRows(out, "h03")) != 2 {
			t.Errorf("s-h03-1 still has c5:\n%s", out)
		}
		if err := captures.Delete(context.Background(), st, "c5"); err != nil {
			t.Fatal(err)
		}
		out, _ = cli(t, 0, args(dsn, "--spike", "s-h03-1")...)
		if out != "no captures of spike s-h03-1 (billy on h03 at "+s0301+", 2s)\n" {
			t.Errorf("after deleting c5: %q", out)
		}
		out, _ = cli(t, 0, append(billy, "--host", "h03")...)
		if len(spikeRows(out, "h03")) != 3 || !strings.Contains(out, "3 spike windows without captures for service billy on host h03") {
			t.Errorf("s-h03-1 is without captures again:\n%s", out)
		}
	})
}

func TestSpikesWithoutCaptures(t *testing.T) {
	f := seedQueryFleet(t)
	seedCaptures(t, f)
	billy := append([]string{"spikes", "--dsn", f.dsn, "--service", "billy", "--without-captures"}, f.rangeArgs()...)

	t.Run("table: the uncaptured windows and a summary that says so", func(t *testing.T) {
		out, _ := cli(t, 0, billy...)
		var got []string
		for _, r := range spikeRows(out, "h0[0-9]") {
			got = append(got, r[0]+" "+r[2])
		}
		want := []string{
			"h03 " + utcTime(f.t0.Add(51*time.Minute)),
			"h05 " + utcTime(f.t0.Add(45*time.Minute)),
			"h04 " + utcTime(f.t0.Add(40*time.Minute)),
			"h03 " + utcTime(f.t0.Add(34*time.Minute)),
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("rows (-want +got):\n%s\n%s", diff, out)
		}
		if !strings.Contains(out, "\n4 spike windows without captures on 3 of 5 hosts (60%) for service billy between ") {
			t.Errorf("summary:\n%s", out)
		}
	})

	t.Run("json: the same windows as spike rows", func(t *testing.T) {
		out, _ := cli(t, 0, append(billy, "-o", "json")...)
		var got []spikeView
		if err := unmarshalRows([]byte(out), &got); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var ids []string
		for _, s := range got {
			ids = append(ids, s.SpikeID)
		}
		if diff := cmp.Diff([]string{"s-h03-3", "s-h05-1", "s-h04-2", "s-h03-2"}, ids); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		if got[0].Host != "h03" || got[0].PeakMS != 990 || got[0].TopSuspect == nil {
			t.Errorf("first row: %+v", got[0])
		}
	})

	t.Run("every window captured says so", func(t *testing.T) {
		out, errs := cli(t, 0, append([]string{"spikes", "--dsn", f.dsn, "--service", "billy", "--host", "h04", "--without-captures",
			"--from", f.t0.Format(time.RFC3339), "--to", f.t0.Add(30 * time.Minute).Format(time.RFC3339)}, "-o", "json")...)
		if !emptyRows(out) || !strings.Contains(errs, "no spikes without captures for service billy on host h04 between") {
			t.Errorf("stdout %q, stderr %q", out, errs)
		}
	})
}

func TestCapturesHelpAndFlagMistakes(t *testing.T) {
	code, _, errs := runCLI(t, "captures", "-h")
	if code != 0 || !strings.Contains(errs, "-spike") || !strings.Contains(errs, "spikes --without-captures") ||
		!strings.Contains(errs, "overlapping a spike window of this service") {
		t.Errorf("captures -h: exit %d\n%s", code, errs)
	}
	for _, tc := range []struct {
		args     []string
		inStderr string
	}{
		{[]string{"captures"}, "--dsn is required"},
		{[]string{"captures", "--dsn", "chdb:///x", "-o", "csv"}, `-o must be table or json, not "csv"`},
		{[]string{"captures", "--dsn", "chdb:///x", "--spike"}, "flag needs an argument: --spike"},
	} {
		code, out, errs := runCLI(t, tc.args...)
		if code != 2 || !strings.Contains(errs, tc.inStderr) || !strings.HasSuffix(errs, "\nrun 'spikehunt captures -h' for help\n") ||
			strings.Contains(errs, "Usage:") || out != "" {
			t.Errorf("spikehunt %v: exit %d, stderr %q; want exit 2, %q and where the help is", tc.args, code, errs, tc.inStderr)
		}
	}
}

// With --report-base (the chart's operator.reportServer.publicURL), each
// capture whose row names its Capture object gets its report's URL on the
// operator's report server, under the table and in -o json; the demo's
// captures, which name none, get none.
func TestCapturesPrintTheirReportURLWithAReportBase(t *testing.T) {
	f := seedQueryFleet(t)
	st := seedCaptures(t, f)
	q := `INSERT INTO captures (capture_id, host, node, backend, profile, window_start, window_end, trigger, spike_ids, uri, bytes, lost_events,
		checksum, status, created_at, updated_at, capture_namespace, capture_name) VALUES ('c9', 'h03', 'node-h03', 'perf', 'cpu', '` + f.at(17*time.Minute-2*time.Second) +
		`', '` + f.at(17*time.Minute+2*time.Second) + `', 'fleet alert', ['s-h03-1'], 's3://captures/c9', 10, 0, 'sha256:c9', 'indexed', ` + f.stamp + `, ` + f.stamp + `, 'shop', 'checkout-node-h03-7')`
	if err := st.Exec(context.Background(), q); err != nil {
		t.Fatalf("%v\n%s", err, q)
	}
	const want = "https://spikehunt-reports.example.com/captures/shop/checkout-node-h03-7/report"
	out, _ := cli(t, 0, "captures", "--dsn", f.dsn, "--spike", "s-h03-1", "--report-base", "https://spikehunt-reports.example.com/")
	if !strings.Contains(out, "\n  c9  "+want+"\n") || strings.Contains(out, "c5  https") {
		t.Errorf("want c9's report URL under the table, and none for c5 (no Capture object):\n%s", out)
	}
	t.Setenv("SPIKEHUNT_REPORT_BASE", "https://spikehunt-reports.example.com")
	out, _ = cli(t, 0, "captures", "--dsn", f.dsn, "--spike", "s-h03-1", "-o", "json")
	var got []captureView
	if err := unmarshalRows([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	urls := map[string]string{}
	for _, c := range got {
		urls[c.CaptureID] = c.ReportURL
	}
	if diff := cmp.Diff(map[string]string{"c9": want, "c5": "", "c1": ""}, urls); diff != "" {
		t.Errorf("report_url (-want +got):\n%s", diff)
	}
	t.Setenv("SPIKEHUNT_REPORT_BASE", "")
	if out, _ := cli(t, 0, "captures", "--dsn", f.dsn, "--spike", "s-h03-1"); strings.Contains(out, "Reports") {
		t.Errorf("reports listed without a report base:\n%s", out)
	}
}

// A capture with an id as long as the operator names them, its trace in a
// store's folder and a long verdict: the table fits a terminal, names no
// location (-o json and captures get do), and the verdict is whole under
// it, with the command that explains it.
func TestTheCapturesTableFitsATerminal(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 10, 19, 30, 0, time.UTC) // fixed date: printed only, never stored
	list := []captureView{{
		CaptureID: "shop-latency-node-0042-bait-3f2a9c1e7b5d4a60", Host: "node-0042", Backend: "perf", Profile: "offcpu",
		WindowStart: t0, WindowEnd: t0.Add(time.Minute), SpikeIDs: []string{"s1"}, Bytes: 7 << 19, LostEvents: 12,
		URI:    "file:///var/lib/spikehunt/demo-store/artifacts/captures/shop-latency-node-0042-bait-3f2a9c1e7b5d4a60.json",
		Status: "indexed", Verdict: c2Verdict + "; " + c2Verdict,
	}, {
		CaptureID: "perf-1795384361120", Host: "h01", Backend: "perf", Profile: "cpu", WindowStart: t0, WindowEnd: t0.Add(20 * time.Second),
		URI: "s3://captures/perf-1795384361120", Status: "uploaded",
	}}
	var b strings.Builder
	printCaptures(&b, list)
	out := b.String()
	for _, l := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(l); n > 120 {
			t.Errorf("a line of %d columns, over 120:\n%s", n, out)
		}
	}
	if strings.Contains(out, "file://") || strings.Contains(out, "s3://") {
		t.Errorf("the table names the traces' locations:\n%s", out)
	}
	if !strings.Contains(out, "spikehunt captures explain CAPTURE") {
		t.Errorf("no pointer to spikehunt captures explain:\n%s", out)
	}
	if !strings.Contains(strings.Join(strings.Fields(out), " "), "shop-latency-node-0042-bait-3f2a9c1e7b5d4a60: "+strings.Join(strings.Fields(list[0].Verdict), " ")) {
		t.Errorf("the verdict is not whole:\n%s", out)
	}
	if !strings.Contains(out, "perf-1795384361120: status uploaded, not indexed\n") {
		t.Errorf("the capture not yet indexed is not said:\n%s", out)
	}
}
