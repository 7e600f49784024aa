package demo

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	xhtml "golang.org/x/net/html"

	"github.com/spikehunt/spikehunt/internal/policy"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/internal/vocab"
	"github.com/spikehunt/spikehunt/pipelines/cli"
	"github.com/spikehunt/spikehunt/pipelines/cli/query"
	"github.com/spikehunt/spikehunt/pipelines/lab/sim"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopShared()
	os.Exit(code)
}

// runCLI runs `spikehunt demo args…` and returns its exit status and
// output, as the spikehunt binary would (without the pass's own figures,
// which pipelines/cmd/spikehunt's tests check).
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runDemo(t, Command{}, args...)
}

// runDemo runs the demo command c.
func runDemo(t *testing.T, c Command, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	if args[0] != "demo" {
		t.Fatalf("%q is not the demo", args[0])
	}
	var out, errb bytes.Buffer
	code = cli.ExitCode("demo", c.Run(context.Background(), args[1:], &out, &errb), &errb)
	return code, out.String(), errb.String()
}

// The demo is the main job: on a small thousand-spikes fleet it must say
// that every host stalls at its own phase, name the softirq suspect on the
// storm CPUs, write the report, and a re-run must load nothing twice.
func TestDemoFindsTheThousandSpikesAndIsIdempotent(t *testing.T) {
	st := testenv.ClickHouse(t)
	dsn := "chdb://" + st.Dir() + "?database=" + st.Database()
	html := filepath.Join(t.TempDir(), "report.html")
	var first, last, rows string
	// Both runs simulate the same hours, even when the clock passes an
	// hour between them, and every run the same time of day: 12:00–14:00
	// UTC yesterday.
	now := time.Now().UTC().Truncate(24 * time.Hour).Add(-24*time.Hour + 14*time.Hour)
	for run := 1; run <= 2; run++ {
		code, out, errs := runDemo(t, Command{Now: func() time.Time { return now }}, "demo", "--dsn", dsn, "--hosts", "40", "--hours", "2", "--report", html)
		last = out
		if code != 0 {
			t.Fatalf("run %d: exit %d\n%s", run, code, errs)
		}
		for _, want := range []string{"migrating the schema", "40/40 hosts simulated and ingested", "detected", "done"} {
			if !strings.Contains(errs, want) {
				t.Fatalf("run %d: progress lacks %q:\n%s", run, want, errs)
			}
		}
		for _, want := range []string{
			"1. The averaged view", "40 of 40 hosts had spikes (100%)", "Every host stalls", "at its own phase",
			"as often on hw class gen5", "gen4 hosts every ~", "the slowest request of a stall takes ~",
			"softirq: 4 of 8 CPUs (0, 2, 4 and 6) at ~", "counters every 30 s, coarser than the ~", "4. What to capture next", "Arm perf flight recorders", html,
			// No spikehunt-agent beside the test binary: one line says so.
			"A real capture on this machine: skipped, ",
		} {
			if !strings.Contains(out, want) {
				t.Fatalf("run %d: the finding lacks %q:\n%s", run, want, out)
			}
		}
		// The pattern sentence of step 2 gives the softirq figures; step 3
		// names the suspect and does not say them again.
		if n := strings.Count(out, "softirq: 4 of 8 CPUs (0, 2, 4 and 6) at ~"); n != 1 || !strings.Contains(out, "softirq cpu 0,2,4,6, as in step 2; a top suspect on") {
			t.Errorf("run %d: the softirq sentence %d times, want once and named in step 3:\n%s", run, n, out)
		}
		checkDemoBait(t, out, 40, 2*time.Hour)
		tab, err := store.Select(context.Background(), st, "SELECT count() FROM requests")
		if err != nil {
			t.Fatal(err)
		}
		if run == 1 {
			first, rows = out, tab.Rows[0][0]
			continue
		}
		if !strings.Contains(errs, "loaded by an earlier run") || tab.Rows[0][0] != rows {
			t.Errorf("a re-run loaded again: %s rows after %s\n%s", tab.Rows[0][0], rows, errs)
		}
		if out != first {
			t.Errorf("a re-run printed another finding:\n%s\n---\n%s", first, out)
		}
	}
	b, err := os.ReadFile(html)
	if err != nil {
		t.Fatalf("report %s: %v", html, err)
	}
	checkReportFollowsTheConsole(t, last, string(b))
}

// checkReportFollowsTheConsole reads the report as a browser would and
// checks it against the console's finding: each step a heading, a
// sentence the console wraps over two lines one paragraph, and the plots
// under the steps they show.
func checkReportFollowsTheConsole(t *testing.T, console, page string) {
	doc, err := xhtml.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatalf("the report does not parse: %v", err)
	}
	var headings, paras []string
	figureStep := map[string]string{}
	var heading string
	var walk func(*xhtml.Node)
	walk = func(n *xhtml.Node) {
		if n.Type == xhtml.ElementNode {
			switch n.Data {
			case "h2":
				heading = nodeText(n)
				headings = append(headings, heading)
			case "p", "li":
				paras = append(paras, nodeText(n))
			case "figure":
				for _, a := range n.Attr {
					if a.Key == "id" {
						figureStep[a.Val] = heading
					}
				}
				return
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	finding, _, _ := strings.Cut(console, "\nReport with plots:")
	lines := strings.Split(finding, "\n")
	// The four numbered steps, and the local capture's heading after them.
	step := regexp.MustCompile(`^(\d\. |A real capture on this machine)`)
	t.Run("each step of the console's finding is a heading of the report", func(t *testing.T) {
		var steps []string
		for _, l := range lines {
			if step.MatchString(l) {
				steps = append(steps, l)
			}
		}
		if len(steps) < 4 || len(headings) != len(steps) {
			t.Fatalf("console steps %q, report headings %q", steps, headings)
		}
		for i, h := range headings {
			if h == "" || !strings.HasPrefix(steps[i], h) {
				t.Errorf("heading %d is %q, the console's step %q", i, h, steps[i])
			}
		}
	})
	t.Run("a sentence the console wraps over two lines is one paragraph of the report", func(t *testing.T) {
		wrapped := 0
		for i := 0; i+1 < len(lines); i++ {
			a, b := strings.TrimSpace(lines[i]), strings.TrimSpace(lines[i+1])
			if a == "" || b == "" || step.MatchString(lines[i]) || step.MatchString(lines[i+1]) || strings.ContainsAny(a[len(a)-1:], ".:)") {
				continue
			}
			wrapped++
			joined := a + " " + b
			if !slices.ContainsFunc(paras, func(p string) bool { return strings.Contains(p, joined) }) {
				t.Errorf("%q and %q, one sentence on the console, are split in the report", a, b)
			}
		}
		if wrapped < 3 {
			t.Errorf("only %d wrapped lines in the console's finding: the check checks little", wrapped)
		}
	})
	t.Run("the plots sit under the steps they show", func(t *testing.T) {
		want := map[string]string{"averaged": "1. The averaged view", "heatmap": "2. Per host: one machine, or all of them?", "raster": "2. Per host: one machine, or all of them?"}
		if diff := cmp.Diff(want, figureStep); diff != "" {
			t.Errorf("plot → step (-want +got):\n%s", diff)
		}
	})
}

func nodeText(n *xhtml.Node) string {
	var b strings.Builder
	var walk func(*xhtml.Node)
	walk = func(m *xhtml.Node) {
		if m.Type == xhtml.TextNode {
			b.WriteString(m.Data)
		}
		for c := m.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}

// Step 4 is the operator's decision, worded: on a fleet of 1,000 nodes in
// three classes the bait per class is what policy.Sample deals, the
// pattern's alert asks for its hosts first, and the fleet's budget of 20 at
// once admits the alert's armings before the bait and says how many bait it
// refused.
func TestDemoCaptureAdviceIsThePolicysDecision(t *testing.T) {
	var nodes []policy.Node
	for i := range 1000 {
		class := []string{"gen3", "gen4", "gen5", "gen5"}[i%4] // gen5 is half the fleet
		nodes = append(nodes, policy.Node{Name: fmt.Sprintf("node-%04d", i), HWClass: class})
	}
	p := query.Pattern{
		PatternID: "p1", Service: "checkout", Class: vocab.ClassFleetRecurrent, Modifiers: []string{vocab.ModifierHWClassSkewed},
		HostsAffected: 1000, HostsTotal: 1000, HostsAffectedShare: 1, RecurrenceIntervalS: 900,
		HWClassSkew: map[string]float64{"gen3": 0.5, "gen4": 1.4, "gen5": 1.1}, TypicalPeakMS: 700,
		TopHosts: []string{"node-0005", "node-0001", "node-0002"},
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) // fixed date: the policy's decision in memory: its bait is dealt for this hour, never stored
	d, alerts, err := decideCaptures("checkout", nodes, []query.Pattern{p}, now)
	if err != nil {
		t.Fatal(err)
	}
	sel := policy.Sample(demoPolicyID, nodes, demoSampling, now)
	if diff := cmp.Diff(sel, d.Selection); diff != "" {
		t.Fatalf("the decision's bait is not policy.Sample's (-want +got):\n%s", diff)
	}
	if len(alerts) != 1 || cmp.Diff([]string{"gen4", "gen5"}, alerts[0].HWClasses) != "" {
		t.Fatalf("alert %+v: want the classes spiking more often than the fleet, most skewed first", alerts)
	}
	out := strings.Join(consoleLines([]section{{title: "4. What to capture next", paras: captureAdvice([]query.Pattern{p}, nil, nodes, d, alerts)}}), "\n")
	t.Logf("\n%s", out)

	for _, c := range sel.Classes {
		if c.Chosen == 0 {
			t.Errorf("class %s gets no bait", c.Class)
		}
		if line := fmt.Sprintf("  %s: %d of %d (", c.Class, c.Chosen, c.Nodes); !strings.Contains(out, line) {
			t.Errorf("advice lacks %q", line)
		}
	}
	for _, want := range []string{
		"passes 350 ms",
		"bait on 5% of the hosts in every hardware class, dealt anew every hour:",
		// The hosts the alert names come first, dealt over their classes
		// (node-0005 and node-0001 are gen4, node-0002 gen5); none of them
		// is bait this hour.
		"The fleet-recurrent pattern's alert asks for 3 more on gen4 and gen5, where the spikes are more frequent,",
		"its most affected hosts first: node-0005, node-0002, node-0001.",
		"Budgets (20 at once in the fleet, 30 min between captures on a node, 6 per pattern per hour):",
		"20 admitted, 17 bait and 3 for the pattern; refused 33 bait (the fleet's limit at once).",
		// 20 armed hosts, each spiking every 15 min at its own phase.
		"With a spike every ~15 min per host, the first capture should land within ~43 s.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("advice lacks %q", want)
		}
	}
}

// checkDemoBait checks the demo's step 4 against policy.Sample over the
// same fleet at the end of the simulated hours (the demo's --to): every
// hardware class gets bait, and the bait per class is the sample's.
func checkDemoBait(t *testing.T, out string, hosts int, hours time.Duration) {
	t.Helper()
	_, to, ok := strings.Cut(out, " --to ")
	if !ok {
		t.Fatalf("the demo names no --to:\n%s", out)
	}
	end, err := time.Parse(time.RFC3339, strings.Fields(to)[0])
	if err != nil {
		t.Fatal(err)
	}
	cfg := sim.Config{Scenario: sim.ThousandSpikes, Hosts: hosts, Seed: 1, Duration: hours, Start: end.Add(-hours)}.Defaults()
	nodes := fleetNodes(cfg)
	sel := policy.Sample(demoPolicyID, nodes, demoSampling, end)
	if len(sel.Classes) != len(cfg.HWClasses) {
		t.Fatalf("sample over %v: %+v", cfg.HWClasses, sel.Classes)
	}
	for _, c := range sel.Classes {
		var names []string
		for _, n := range sel.Nodes {
			if nodes[nodeIndex(t, n)].HWClass == c.Class {
				names = append(names, n)
			}
		}
		line := fmt.Sprintf("  %s: %d of %d (%s)", c.Class, c.Chosen, c.Nodes, nameSample(names, 4))
		if c.Chosen == 0 || !strings.Contains(out, line) {
			t.Errorf("step 4 lacks the bait of class %s, %q:\n%s", c.Class, line, out)
		}
	}
	for _, want := range []string{"pattern's alert asks for 3 more", fmt.Sprintf("all %d admitted, %d bait and 3 for the pattern.", len(sel.Nodes)+3, len(sel.Nodes))} {
		if !strings.Contains(out, want) {
			t.Errorf("step 4 lacks %q:\n%s", want, out)
		}
	}
}

// nodeIndex is the index of a simulated node-NNNN.
func nodeIndex(t *testing.T, name string) int {
	var i int
	if _, err := fmt.Sscanf(name, "node-%d", &i); err != nil {
		t.Fatalf("node %q: %v", name, err)
	}
	return i
}

// As root with perf, the demo also captures on this host: the host joins
// the fleet in a class of its own and gets bait, the agent's perf recorder
// fires on the local workload's slow request, and the captures row links
// the capture to the spike the detector found in the same requests. A
// later run's simulated hours do not count the host among the fleet.
func TestDemoCapturesOnThisHostAndIndexesItAgainstItsSpike(t *testing.T) {
	if _, err := exec.LookPath("perf"); err != nil || os.Geteuid() != 0 {
		testenv.RequirePrivileged(t, "perf as root", err)
	}
	agent := filepath.Join(t.TempDir(), "spikehunt-agent")
	if out, err := exec.Command("go", "build", "-o", agent, "github.com/spikehunt/spikehunt/agents/cmd/spikehunt-agent").CombinedOutput(); err != nil {
		t.Fatalf("build spikehunt-agent: %v\n%s", err, out)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	st := testenv.ClickHouse(t)
	dsn := "chdb://" + st.Dir() + "?database=" + st.Database()
	page := filepath.Join(t.TempDir(), "report.html")
	code, out, errs := runCLI(t, "demo", "--dsn", dsn, "--hosts", "40", "--hours", "0.5", "--agent", agent, "--report", page)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	// The report shows the stalled request's thread timeline, mostly
	// blocked, and the window's flame graph after the four steps.
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	local := string(html)[max(strings.Index(string(html), "<h2>A real capture"), 0):]
	if !strings.Contains(local, `<figure id="capture-timeline"`) || !strings.Contains(local, `<rect class="seg blocked"`) ||
		!strings.Contains(local, `<figure id="capture-flame"`) || !strings.Contains(local, `<title>all: `) {
		t.Errorf("the report's local capture lacks the capture's timeline or flame graph:\n%.2000s", local)
	}
	t.Logf("\n%s", out[strings.Index(out, "4. What"):])
	if want := fmt.Sprintf("  local: 1 of 1 (%s)", host); !strings.Contains(out, want) {
		t.Errorf("step 4 lacks %q", want)
	}
	m := regexp.MustCompile(`captured on ` + regexp.QuoteMeta(host) + `: perf, (\d+) bytes, lost (\d+), window \S+–\S+ UTC, linked to spike ([0-9a-f]+)\.`).FindStringSubmatch(out)
	// The agent's own analysis names the workload's thread, about the
	// second it blocked and the sleep it blocked in.
	if v := regexp.MustCompile(`(?m)^\s+(blocked (\d+ ms|\d+\.\d+ s) in do_nanosleep \(stack [^)]*\); woken by its timer; \S+ m?s of the request on \S+\[\d+\]:.*)$`).FindStringSubmatch(out); v == nil {
		t.Errorf("no verdict naming the blocked thread and its nanosleep:\n%s", out[strings.Index(out, "A real capture"):])
	} else if d, err := time.ParseDuration(strings.ReplaceAll(v[2], " ", "")); err != nil || d < 900*time.Millisecond || d > 1200*time.Millisecond {
		t.Errorf("verdict %q: blocked %v (%v), want about the workload's 1 s", v[1], d, err)
	}
	if m == nil {
		t.Fatalf("no local capture linked to a spike:\n%s\n%s", out, errs)
	}
	ctx := context.Background()
	tab, err := store.Select(ctx, st, `SELECT backend, toString(bytes), toString(lost_events), toString(spike_ids), status,
		toUnixTimestamp64Milli(window_start), toUnixTimestamp64Milli(window_end)
		FROM captures FINAL WHERE host = `+store.QuoteString(host))
	if err != nil || len(tab.Rows) != 1 {
		t.Fatalf("captures of %s: %v, %v", host, tab.Rows, err)
	}
	c := tab.Rows[0]
	if diff := cmp.Diff([]string{"perf", m[1], m[2], "['" + m[3] + "']", "indexed"}, c[:5]); diff != "" {
		t.Errorf("captures row (-want +got):\n%s", diff)
	}
	tab, err = store.Select(ctx, st, fmt.Sprintf(`SELECT count() FROM spikes FINAL WHERE is_deleted = 0 AND spike_id = %s
		AND host = %s AND toUnixTimestamp64Milli(window_start) < %s AND toUnixTimestamp64Milli(window_end) > %s`,
		store.QuoteString(m[3]), store.QuoteString(host), c[6], c[5]))
	if err != nil || tab.Rows[0][0] != "1" {
		t.Errorf("spike %s on %s overlapping the capture's window: %v, %v", m[3], host, tab.Rows, err)
	}

	// The pass over this host's seconds leaves no pattern behind: run in
	// the first minutes of an hour, its ten-minute look-back would take the
	// fleet's last spikes, which all end at the hour, for a synchronized
	// burst (seen on the 300-host demo; this small fleet may not show it).
	explore := regexp.MustCompile(`Explore: .* --from (\S+) --to (\S+)\n`).FindStringSubmatch(out)
	if explore == nil {
		t.Fatalf("no Explore line:\n%s", out)
	}
	from, err := time.Parse(time.RFC3339, explore[1])
	if err != nil {
		t.Fatal(err)
	}
	simEnd := from.Add(30 * time.Minute)
	tab, err = store.Select(ctx, st, "SELECT count() FROM patterns FINAL WHERE is_deleted = 0 AND lookback_end > parseDateTimeBestEffort("+
		store.QuoteString(simEnd.Format(time.RFC3339))+")")
	if err != nil || tab.Rows[0][0] != "0" {
		t.Errorf("patterns after the simulated hours: %v, %v", tab.Rows, err)
	}

	// The range the demo prints holds the capture, which comes after the
	// simulated hours.
	var capOut, capErr bytes.Buffer
	if err := query.Captures(ctx, []string{"--dsn", dsn, "--from", explore[1], "--to", explore[2], "--host", host}, &capOut, &capErr); err != nil ||
		!strings.Contains(capOut.String(), host) || !strings.Contains(capOut.String(), "perf") {
		t.Errorf("captures over the printed range %s–%s: %v\n%s%s", explore[1], explore[2], err, capOut.String(), capErr.String())
	}

	// A run an hour later covers these seconds with its simulated hours.
	now := time.Now()
	if err := forgetLocalRows(ctx, st, "checkout", host, now.Add(-time.Hour), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	tab, err = store.Select(ctx, st, "SELECT count() FROM latency_1s WHERE host = "+store.QuoteString(host))
	if err != nil || tab.Rows[0][0] != "0" {
		t.Errorf("this host's rows after forgetLocalRows: %v %v", tab.Rows, err)
	}
}
