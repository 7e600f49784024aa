package detect

import (
	"context"
	"strconv"
	"strings"
	"testing"
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

// The tails are computed once in tailRefresh of data time: passes 5
// minutes apart share them, one 10 minutes on computes them anew. Young
// tails serve a sixth of the minutes they span: over 5 minutes, 50 s.
func TestHostTailsAreComputedOnceInTenMinutes(t *testing.T) {
	ctx := context.Background()
	st := migrated(t)
	fleetLoad{hosts: 2, seconds: 3600, rps: 2, seed: 6}.insert(t, st)
	var ats []time.Time
	for _, to := range []int{300, 330, 360, 3000, 3300, 3600} {
		at, err := tailsAt(ctx, st, "billy", sec(to))
		if err != nil {
			t.Fatal(err)
		}
		ats = append(ats, at)
	}
	if want := []time.Time{sec(300), sec(300), sec(360), sec(3000), sec(3000), sec(3600)}; !cmp.Equal(want, ats) {
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
	q := tailsRefreshSQL("a;b", sec(3600))
	if strings.Contains(q, ";") {
		t.Errorf("the tails refresh holds a ';':\n%s", q)
	}
}
