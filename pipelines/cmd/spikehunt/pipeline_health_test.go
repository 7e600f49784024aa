package main

import (
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// pipelineHealthMetrics is every metric the pipeline-health dashboard reads
// from counters (docs/pipeline-health.md), with whether it is a delta.
var pipelineHealthMetrics = map[string]bool{
	"spikehunt.agent.requests.dropped": true,
	"spikehunt.agent.spool.bytes":      false,
	"spikehunt.agent.export.records":   true,
	"spikehunt.capture.active":         false,
	"spikehunt.capture.max_concurrent": false,
	"spikehunt.ingest.rows":            true,
	"spikehunt.ingest.lag":             false,
	"spikehunt.ingest.dlq":             true,
	"spikehunt.detect.pass_seconds":    false,
	"spikehunt.detect.spikes":          true,
}

// checkPipelineHealthRows checks that counters holds rows of every
// pipeline-health metric, deltas with an interval and gauges without,
// none per CPU, and returns a query function.
func checkPipelineHealthRows(t *testing.T, st store.Store) func(string) string {
	t.Helper()
	q := func(sql string) string {
		t.Helper()
		tab, err := store.Select(context.Background(), st, sql)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, r := range tab.Rows {
			lines = append(lines, strings.Join(r, " "))
		}
		return strings.Join(lines, "\n")
	}
	got := map[string]string{}
	for _, l := range strings.Split(q(`SELECT metric, count(), min(interval_ms > 0), max(interval_ms > 0), min(cpu), max(cpu)
		FROM counters WHERE metric LIKE 'spikehunt.agent.%' OR metric LIKE 'spikehunt.capture.%' OR metric LIKE 'spikehunt.ingest.%'
			OR metric LIKE 'spikehunt.detect.%' GROUP BY metric`), "\n") {
		f := strings.Fields(l)
		if len(f) == 6 {
			got[f[0]] = strings.Join(f[2:], " ")
		}
	}
	for m, delta := range pipelineHealthMetrics {
		want := "0 0 -1 -1"
		if delta {
			want = "1 1 -1 -1"
		}
		if g, ok := got[m]; !ok {
			t.Errorf("no %s rows", m)
		} else if g != want {
			t.Errorf("%s: (all deltas, any delta, min cpu, max cpu) = %s, want %s", m, g, want)
		}
	}
	return q
}

// A simulated fleet through the in-process ingest, then a detector pass:
// counters holds a row of every pipeline-health metric, the ingest's rows
// count what the tables hold, and the pass's timings are there by stage.
func TestSimIngestDetectFillsThePipelineHealthMetrics(t *testing.T) {
	st := testenv.ClickHouse(t)
	dsn := "chdb://" + st.Dir() + "?database=" + st.Database()
	code, _, errs := runCLI(t, "sim", "--dsn", dsn, "--hosts", "6", "--duration", "40m", "--period-min", "8m", "--period-max", "9m",
		"--capture.max-concurrent", "2", "--capture.armed", "0.5", "--seed", "3")
	if code != 0 {
		t.Fatalf("sim: exit %d\n%s", code, errs)
	}
	code, out, errs := runCLI(t, "detect", "--dsn", dsn, "--every", "0", "--since", "3h", "--instance", "detect-test")
	if code != 0 {
		t.Fatalf("detect: exit %d\n%s", code, errs)
	}
	// Three hours go in passes of an hour (--max-span): their new windows
	// add up.
	newWindows := 0
	for _, m := range regexp.MustCompile(`(\d+) new or changed`).FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		newWindows += n
	}
	if newWindows == 0 {
		t.Fatalf("detect found no spike windows:\n%s", out)
	}
	q := checkPipelineHealthRows(t, st)
	if got, want := q("SELECT toString(sum(value)) FROM counters WHERE metric = 'spikehunt.ingest.rows' AND device = 'requests'"), q("SELECT toString(count()) FROM requests"); got != want {
		t.Errorf("spikehunt.ingest.rows for requests: %s, requests holds %s", got, want)
	}
	if got := q("SELECT host, mode, max(value) > 0 FROM counters WHERE metric = 'spikehunt.detect.pass_seconds' GROUP BY host, mode ORDER BY mode"); got !=
		"detect-test patterns 1\ndetect-test spikes 1\ndetect-test suspects 1\ndetect-test total 1" {
		t.Errorf("pass seconds by stage:\n%s", got)
	}
	if got := q("SELECT toString(sum(value)) FROM counters WHERE metric = 'spikehunt.detect.spikes' AND host = 'detect-test'"); got != strconv.Itoa(newWindows) {
		t.Errorf("spikehunt.detect.spikes %s, the passes wrote %d new windows", got, newWindows)
	}
	if got := q("SELECT uniqExact(host) FROM counters WHERE metric = 'spikehunt.agent.requests.dropped'"); got != "6" {
		t.Errorf("drops from %s hosts, want all 6", got)
	}
	n, _ := strconv.Atoi(q("SELECT count() FROM counters WHERE metric = 'spikehunt.capture.active' AND value = 1"))
	if n == 0 {
		t.Error("no simulated host has a capture armed")
	}
}

// spikehunt demo leaves a row of every pipeline-health metric too.
func TestDemoFillsThePipelineHealthMetrics(t *testing.T) {
	st := testenv.ClickHouse(t)
	dsn := "chdb://" + st.Dir() + "?database=" + st.Database()
	code, _, errs := runCLI(t, "demo", "--dsn", dsn, "--hosts", "4", "--hours", "0.5", "--local-capture=false",
		"--report", filepath.Join(t.TempDir(), "report.html"))
	if code != 0 {
		t.Fatalf("demo: exit %d\n%s", code, errs)
	}
	checkPipelineHealthRows(t, st)
}
