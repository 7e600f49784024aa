package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/capture/explain"
	"github.com/spikehunt/spikehunt/internal/captures"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// readmeIncidentCommands are the spikehunt commands of the README's
// "Hunting an incident" block, as a user copies them: comments cut,
// "hosts|spikes|suspects" one command each, optional [--flag …] parts
// left out.
func readmeIncidentCommands(t *testing.T) [][]string {
	t.Helper()
	b, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Hunting an incident\n")
	if !ok {
		t.Fatal(`README.md has no "## Hunting an incident" section`)
	}
	_, block, ok := strings.Cut(section, "```sh\n")
	if !ok {
		t.Fatal("the incident section has no sh block")
	}
	block, _, _ = strings.Cut(block, "```")
	optional := regexp.MustCompile(`\s*\[[^\]]*\]`)
	var cmds [][]string
	for _, line := range strings.Split(block, "\n") {
		rest, ok := strings.CutPrefix(line, "bin/spikehunt ")
		if !ok {
			continue // a comment's continuation
		}
		rest, _, _ = strings.Cut(rest, " #")
		words := strings.Fields(optional.ReplaceAllString(rest, ""))
		for _, name := range strings.Split(words[0], "|") {
			cmds = append(cmds, append([]string{name}, words[1:]...))
		}
	}
	return cmds
}

// Every command of the README's incident block runs as written against a
// store that holds what it asks about: a stalling fleet of the service
// checkout from the last hours whose NET_RX softirq moves with the
// stalls, detected, and a capture of one of its
// spikes whose id is the README's. The example ids and "…" are the only
// words replaced.
func TestTheREADMEsIncidentCommandsRunAsWritten(t *testing.T) {
	cmds := readmeIncidentCommands(t)
	if len(cmds) < 8 {
		t.Fatalf("%d commands in the README's incident block, want patterns, hosts, spikes, suspects (twice), captures, captures get and explain: %q", len(cmds), cmds)
	}
	st := testenv.ClickHouse(t)
	dsn := "chdb://" + st.Dir() + "?database=" + st.Database()
	from := time.Now().UTC().Add(-4 * time.Hour).Truncate(time.Minute)
	if code, _, errs := runCLI(t, "sim", "--dsn", dsn, "--scenario", "nic-softirq-storm", "--hosts", "30",
		"--duration", "3h30m", "--from", from.Format(time.RFC3339), "--counter-step", "30s"); code != 0 {
		t.Fatalf("sim: exit %d\n%s", code, errs)
	}
	if code, _, errs := runCLI(t, "detect", "--dsn", dsn, "--service", "checkout", "--every", "0", "--since", "6h"); code != 0 {
		t.Fatalf("detect: exit %d\n%s", code, errs)
	}
	code, out, errs := runCLI(t, "spikes", "--dsn", dsn, "--since", "6h", "-o", "json", "--limit", "1")
	var spikes struct {
		Rows []struct {
			SpikeID     string    `json:"spike_id"`
			Host        string    `json:"host"`
			WindowStart time.Time `json:"window_start"`
			WindowEnd   time.Time `json:"window_end"`
		} `json:"rows"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &spikes) != nil || len(spikes.Rows) == 0 {
		t.Fatalf("spikes: exit %d, %s\n%s", code, out, errs)
	}
	spike := spikes.Rows[0]
	captureID := indexReadmeCapture(t, st, spike.Host, spike.WindowStart, spike.WindowEnd)

	t.Chdir(t.TempDir()) // captures get writes its folder here
	exampleCapture := regexp.MustCompile(`^checkout-offcp-buildbox-bait-[0-9a-f.]+$`)
	for _, c := range cmds {
		args := make([]string, len(c))
		for i, w := range c {
			switch {
			case w == "…":
				w = dsn
			case w == "3fa5c0de12ab":
				w = spike.SpikeID[:12]
			case exampleCapture.MatchString(w):
				if !strings.HasPrefix(captureID, w) {
					t.Fatalf("the README's capture id %s is not a prefix of the fixture's %s", w, captureID)
				}
			}
			args[i] = w
		}
		code, out, errs := runCLI(t, args...)
		if c[0] == "patterns" && !strings.Contains(out, "softirq") {
			t.Errorf("spikehunt %s: no pattern naming the softirq:\n%s", strings.Join(c, " "), out)
		}
		if code != 0 || strings.TrimSpace(out) == "" {
			t.Errorf("spikehunt %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(c, " "), code, out, errs)
			continue
		}
		t.Logf("spikehunt %s: %d lines", strings.Join(c, " "), strings.Count(out, "\n"))
	}
}

// indexReadmeCapture seals and indexes a perf capture of host over
// [from, to], under the id the README's examples show.
func indexReadmeCapture(t *testing.T, st store.Store, host string, from, to time.Time) string {
	t.Helper()
	ctx := context.Background()
	const id = "checkout-offcp-buildbox-bait-3f2a9c1e7b5d4a60.1795384361"
	req := record.RequestRecord{Start: from, End: from.Add(time.Second), LatencyMS: 1000, Service: "checkout", Endpoint: "/pay", ThreadID: 4242}
	verdict := "blocked 998 ms in do_nanosleep (stack do_nanosleep ← hrtimer_nanosleep); woken by its timer"
	a := explain.Analysis{Version: explain.AnalysisVersion, Events: 1000, Samples: 40,
		Requests: []explain.RequestVerdict{{Request: req, Thread: "web[4242]", Blocked: 998 * time.Millisecond,
			BlockingCall: "do_nanosleep", WokenBy: "its timer", Verdict: verdict}},
		TopStacks: []explain.StackShare{{Stack: "web;main;serve;handle", Samples: 40}},
		CPUs:      []explain.CPUUse{{CPU: 0, Samples: 40}},
		Findings:  record.Findings{Verdict: verdict, HottestCPU: 0, HottestCPUBusy: 1}}
	dir := t.TempDir()
	b, _ := json.Marshal(a)
	for name, content := range map[string]string{"perf.data.1": "trace", "explain.json": string(b), "stacks.folded": "web;main;serve;handle 40\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	md := &record.Metadata{ID: id, Host: host, Backend: "perf", Profile: "default", ArmedAt: from.Add(-time.Minute), FiredAt: req.End,
		WindowStart: from.Add(-time.Second), WindowEnd: to.Add(time.Second), Trigger: record.FireCause{Kind: "latency", Latency: 500 * time.Millisecond},
		Findings: &a.Findings, Files: []record.File{{Name: "perf.data.1"}, {Name: "explain.json"}, {Name: "stacks.folded"}}}
	if err := artifact.Seal(dir, md); err != nil {
		t.Fatal(err)
	}
	s, err := artifact.OpenLocalStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	loc, err := s.Put(ctx, md, dir)
	if err != nil {
		t.Fatal(err)
	}
	linked, err := captures.Index(ctx, st, captures.Capture{ID: id, Host: host, Backend: "perf", WindowStart: md.WindowStart,
		WindowEnd: md.WindowEnd, URI: loc.Metadata, Checksum: md.Checksum})
	if err != nil || len(linked) == 0 {
		t.Fatalf("index the capture: linked %v, %v", linked, err)
	}
	return id
}
