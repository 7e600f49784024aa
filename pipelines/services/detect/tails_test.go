package detect

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spikehunt/spikehunt/internal/store"
)

// A host that stalls 3 s every 3 minutes has one request in sixty in its
// stalls: its merged p99 is the stall, and bars from it would lie past
// every stall. Its median minute's p99 stands for its body, and the host
// rule alone finds each stall.
func TestAHostWhoseStallsAreItsP99IsJudgedByItsBody(t *testing.T) {
	ctx := context.Background()
	st := migrated(t)
	fleetLoad{hosts: 4, seconds: 1800, rps: 20, stall: "h = 0 AND s % 180 BETWEEN 30 AND 32", stallUS: 700_000, stallJitterUS: 200_000, seed: 5}.insert(t, st)
	var want []window
	for s := 30; s < 1800; s += 180 {
		want = append(want, window{host(0), s, s + 3})
	}
	if diff := cmp.Diff(want, hostRuleWindows(t, st, 1800)); diff != "" {
		t.Errorf("a host stalling 3 s in every 3 minutes: the host rule's windows (-want +got):\n%s", diff)
	}
	tab, err := store.Select(ctx, st, `SELECT host, round(p99_us), round(merged_p99_us) FROM host_tails FINAL WHERE host != '' ORDER BY host`)
	if err != nil {
		t.Fatal(err)
	}
	if len(tab.Rows) != 4 {
		t.Fatalf("host_tails: %v, want a row per host", tab.Rows)
	}
	for _, r := range tab.Rows {
		p99, merged := atof(t, r[1]), atof(t, r[2])
		if p99 > 20_000 {
			t.Errorf("%s: p99 %g µs, want the body's (a 4 ms median, σ 0.25: ~7 ms)", r[0], p99)
		}
		if stalled := r[0] == host(0); stalled != (merged > 500_000) {
			t.Errorf("%s: merged p99 %g µs; want the stall's only on the stalling host", r[0], merged)
		}
	}
}

// At one request a second no minute holds requests enough for its p99
// (minMinuteRequests), so the median minute cannot stand for the body of
// a host whose stalls are its p99: 20 s in every 15 minutes is one of its
// requests in 45. Its five-minute blocks can: two in three hold no stall.
func TestASlowHostWhoseStallsAreItsP99IsJudgedByItsBlocks(t *testing.T) {
	ctx := context.Background()
	st := migrated(t)
	fleetLoad{hosts: 3, seconds: 3600, stall: "h = 0 AND s % 900 BETWEEN 100 AND 119", stallUS: 700_000, stallJitterUS: 200_000, seed: 9}.insert(t, st)
	var want []window
	for s := 100; s < 3600; s += 900 {
		want = append(want, window{host(0), s, s + 20})
	}
	if diff := cmp.Diff(want, hostRuleWindows(t, st, 3600)); diff != "" {
		t.Errorf("a host at one request a second stalling 20 s in every 15 minutes: the host rule's windows (-want +got):\n%s", diff)
	}
	tab, err := store.Select(ctx, st, `SELECT host, round(p99_us), round(merged_p99_us) FROM host_tails FINAL WHERE host = 'host-000'`)
	if err != nil {
		t.Fatal(err)
	}
	if len(tab.Rows) != 1 {
		t.Fatalf("host_tails: %v, want the stalling host's row", tab.Rows)
	}
	if p99, merged := atof(t, tab.Rows[0][1]), atof(t, tab.Rows[0][2]); p99 > 20_000 || merged < 500_000 {
		t.Errorf("host-000: p99 %g µs, merged %g µs; want the body's (~7 ms) and the stall's", p99, merged)
	}
}

// The refresh keeps the look-back's settled five-minute blocks and reads
// them back: tails over kept blocks are the tails over latency_1m's
// minutes alone, and a later refresh computes only the blocks that have
// settled since.
func TestHostTailsFromKeptBlocksAreTheTailsFromTheMinutes(t *testing.T) {
	ctx := context.Background()
	st := migrated(t)
	fleetLoad{hosts: 3, seconds: 4800, rps: 5, sigma: 0.6, stall: "h = 0 AND s % 600 BETWEEN 100 AND 102", seed: 11}.insert(t, st)
	const tailsQ = `SELECT host, tail_n, minutes, round(rate, 6), round(p90_us, 1), round(p99_us, 1), round(merged_p99_us, 1)
FROM host_tails FINAL WHERE computed_to = %d ORDER BY host`
	blocksQ := `SELECT uniqExact(block), count() FROM host_tail_blocks`

	p := newTailsParams("billy", sec(3600))
	p.KeptTo = p.KeptFrom
	if err := st.Exec(ctx, render(tailsRefreshTmpl, p)); err != nil {
		t.Fatal(err)
	}
	fromMinutes := queryRows(t, st, fmt.Sprintf(tailsQ, sec(3600).Unix()))
	if len(fromMinutes) != 4 {
		t.Fatalf("tails from the minutes: %v, want 3 hosts and the fleet", fromMinutes)
	}
	if got := queryRows(t, st, blocksQ); got[0][1] != "0" {
		t.Fatalf("a refresh without kept blocks kept %v", got)
	}
	if err := st.Exec(ctx, "TRUNCATE TABLE host_tails"); err != nil {
		t.Fatal(err)
	}
	if err := refreshTails(ctx, st, "billy", sec(3600)); err != nil {
		t.Fatal(err)
	}
	// The counts alike; the quantiles within the digests' own error (they
	// are merged in another order).
	fromBlocks := queryRows(t, st, fmt.Sprintf(tailsQ, sec(3600).Unix()))
	same := len(fromMinutes) == len(fromBlocks)
	for i := 0; same && i < len(fromMinutes); i++ {
		for j, a := range fromMinutes[i] {
			b := fromBlocks[i][j]
			if j < 4 {
				same = same && a == b
				continue
			}
			x, y := atof(t, a), atof(t, b)
			same = same && math.Abs(x-y) <= 0.005*math.Max(math.Abs(x), math.Abs(y))
		}
	}
	if !same {
		t.Errorf("tails over kept blocks:\n%v\nwant those from the minutes (counts alike, quantiles within 0.5%%):\n%v", fromBlocks, fromMinutes)
	}
	// Settled at 3600: the blocks that ended 15 minutes before, [0, 2700).
	if got := strings.Join(queryRows(t, st, blocksQ)[0], " "); got != "9 27" {
		t.Errorf("kept blocks and rows after a refresh at 3600: %s, want 9 27 (3 hosts)", got)
	}
	if err := refreshTails(ctx, st, "billy", sec(4500)); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(queryRows(t, st, blocksQ)[0], " "); got != "12 36" {
		t.Errorf("kept blocks and rows after a refresh at 4500: %s, want 12 36 (the 9 kept once, 3 more)", got)
	}
}

// The tails are computed once in tailRefresh of data time, counted from a
// pass's start: passes 5 minutes apart share them, one starting 10
// minutes on computes them anew. Young tails serve a sixth of the minutes
// they span: over 5 minutes, 50 s.
func TestHostTailsAreComputedOnceInTenMinutes(t *testing.T) {
	ctx := context.Background()
	st := migrated(t)
	fleetLoad{hosts: 2, seconds: 3600, rps: 2, seed: 6}.insert(t, st)
	var ats []time.Time
	// Passes of 30 s, and last an hour's catch-up, which the tails computed
	// at its start serve.
	for _, pass := range [][2]int{{270, 300}, {300, 330}, {360, 390}, {2970, 3000}, {3270, 3300}, {3600, 3630}, {3630, 7230}} {
		at, err := tailsAt(ctx, st, "billy", sec(pass[0]), sec(pass[1]))
		if err != nil {
			t.Fatal(err)
		}
		ats = append(ats, at)
	}
	if want := []time.Time{sec(300), sec(300), sec(390), sec(3000), sec(3000), sec(3630), sec(3630)}; !cmp.Equal(want, ats) {
		t.Errorf("tails computed at %v, want %v", ats, want)
	}
	tab, err := store.Select(ctx, st, `SELECT countIf(host != ''), countIf(host = '') FROM host_tails`)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(tab.Rows[0], " "); got != "8 4" {
		t.Errorf("host_tails holds %s host and fleet rows, want 8 4 (2 hosts and the fleet, 4 times)", got)
	}
}

// A fleet in its first minutes: no host has a tail of its own (2,000
// requests), but the fleet's pooled requests say how far the body
// reaches. On σ = 1.2 at one request a second a lone request of 600 ms is
// the body's (at its rate, once in some 20 host-hours; the fleet's spread
// bars put the lone bar near 200 ms), while two of 900 ms in two seconds
// are a stall.
func TestAYoungHostHasTheFleetsTail(t *testing.T) {
	st := migrated(t)
	fleetLoad{hosts: 20, seconds: 360, sigma: 1.2, seed: 7,
		stall: "(h = 3 AND s = 330) OR (h = 5 AND s IN (340, 341))", stallUS: 600_000, stallJitterUS: 300_000}.insert(t, st)
	want := []window{{host(5), 340, 342}}
	if diff := cmp.Diff(want, hostRuleWindows(t, st, 360)); diff != "" {
		t.Errorf("a fleet 6 minutes old, σ 1.2 at one request a second: the host rule's windows (-want +got):\n%s", diff)
	}
}

// A fleet of one host in its third minute: its pooled tail is its own,
// whose stalls can be its p99 then, so the fleet's row does not stand for
// it before 5 minutes, as its own tail does not. Its stall is found.
func TestAFleetOfOneHostsFirstStallIsFound(t *testing.T) {
	st := migrated(t)
	fleetLoad{hosts: 1, seconds: 180, rps: 20, seed: 8,
		stall: "s IN (60, 61, 120, 121, 150, 151)", stallUS: 700_000, stallJitterUS: 200_000}.insert(t, st)
	want := []window{{host(0), 60, 62}, {host(0), 120, 122}, {host(0), 150, 152}}
	if diff := cmp.Diff(want, hostRuleWindows(t, st, 180)); diff != "" {
		t.Errorf("one host 3 minutes old at 20 requests a second, stalling three times: the host rule's windows (-want +got):\n%s", diff)
	}
}

func atof(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The refresh is an INSERT with its SELECT in the query text, which the
// store's HTTP front (serve-clickhouse) refuses when it holds a ';': one
// in a comment made every detector behind it fail its passes, and one in
// a service's name would fail that service's.
func TestTheTailsRefreshHoldsNoSemicolon(t *testing.T) {
	p := newTailsParams("a;b", sec(3600))
	p.Missing = [][2]time.Time{{sec(0), sec(300)}, {sec(600), sec(900)}}
	for _, tmpl := range []*template.Template{tailBlocksKeptTmpl, tailBlocksKeepTmpl, tailsRefreshTmpl} {
		if q := render(tmpl, p); strings.Contains(q, ";") {
			t.Errorf("the tails refresh's %s holds a ';':\n%s", tmpl.Name(), q)
		}
	}
}
