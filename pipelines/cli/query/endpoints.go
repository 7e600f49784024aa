package query

import (
	"context"
	"fmt"
	"strings"

	"github.com/spikehunt/spikehunt/internal/store"
)

// PatternEndpoint is one endpoint's requests during a pattern's stalls:
// those filed under the seconds of its spike windows and the second
// before each (where the requests a stall caught in flight arrived), read
// from requests at query time.
type PatternEndpoint struct {
	Endpoint string `json:"endpoint"`
	// Requests is how many requests of the endpoint arrived during the
	// stalls (the weights of the kept ones), and Slow how many of them
	// took longer than their window's threshold (peak / score).
	Requests float64 `json:"requests"`
	Slow     float64 `json:"slow"`
	// SlowWindows is how many of the pattern's windows held a slow request
	// of the endpoint.
	SlowWindows int `json:"slow_windows"`
}

// maxPatternEndpoints bounds what is read per pattern: an app that puts
// ids into its routes has one endpoint per id, and the sentence names a
// few.
const maxPatternEndpoints = 100

// Thresholds of endpointClause: an endpoint stalls when its share of slow
// requests is at least stalledShare of the highest endpoint's, and is
// unaffected when it had requests during the stalls and its share is at
// most unaffectedShare of the highest.
// An endpoint is judged unaffected only with requests enough that, had it
// stalled like the worst one, minExpectedSlow of them would have been
// slow (no slow one then happens by chance once in 20,000).
const (
	stalledShare    = 0.25
	unaffectedShare = 0.05
	minExpectedSlow = 10
)

// readEndpoints fills in p.Endpoints from the requests of the pattern's
// windows (most slow requests first, then most requests). Without
// requests (they expire before the detections) it stays empty.
func readEndpoints(ctx context.Context, st store.Store, p *Pattern, windows Where) error {
	secs := `SELECT spike_id, host, if(score > 0, peak_us / score, toFloat64(peak_us)) AS thr,
		arrayJoin(range(toUInt32(toUnixTimestamp(window_start)) - 1, toUInt32(toUnixTimestamp(window_end)))) AS s
		FROM spikes FINAL WHERE ` + windows.String()
	reqs := Where{}.Equals("service", p.Service).
		And("ts >= fromUnixTimestamp64Milli(toInt64(" + fmt.Sprint(p.LookbackStart.UnixMilli()-1000) + "), 'UTC')").
		And("ts < fromUnixTimestamp64Milli(toInt64(" + fmt.Sprint(p.LookbackEnd.UnixMilli()+60_000) + "), 'UTC')").
		And("(host, toUInt32(toDateTime(ts))) IN (SELECT host, s FROM (" + secs + "))")
	rows, err := readRows(ctx, st, "requests", `SELECT toString(r.endpoint) AS endpoint, toFloat64(sum(r.weight)) AS requests,
		toFloat64(sumIf(r.weight, r.latency_us > w.thr)) AS slow, toInt64(uniqExactIf(w.spike_id, r.latency_us > w.thr)) AS slow_windows
	FROM (
		SELECT host, toUInt32(toDateTime(ts)) AS s, endpoint, weight, latency_us FROM requests WHERE `+reqs.String()+`
	) AS r
	INNER JOIN (`+secs+`) AS w USING (host, s)
	GROUP BY endpoint
	ORDER BY slow DESC, requests DESC, endpoint
	LIMIT `+fmt.Sprint(maxPatternEndpoints), func(c *columns) func(int) PatternEndpoint {
		name, n, slow, wins := col[string](c, "endpoint"), col[float64](c, "requests"), col[float64](c, "slow"), col[int64](c, "slow_windows")
		return func(i int) PatternEndpoint {
			return PatternEndpoint{Endpoint: name.Row(i), Requests: n.Row(i), Slow: slow.Row(i), SlowWindows: int(wins.Row(i))}
		}
	})
	if err != nil {
		return err
	}
	p.Endpoints = append([]PatternEndpoint{}, rows...)
	return nil
}

// stalledEndpoints splits the endpoints of a pattern's stalls into those
// that stall and those unaffected, when the stalls concentrate on some
// endpoints: every endpoint with requests during the stalls is either one
// whose share of slow requests is near the highest, or one with almost
// none. Both are nil when the stalls hold up every endpoint alike, when
// an endpoint is in between, or without requests.
func stalledEndpoints(eps []PatternEndpoint) (stalled, unaffected []string) {
	top := 0.0
	for _, e := range eps {
		if e.Requests > 0 {
			top = max(top, e.Slow/e.Requests)
		}
	}
	if top == 0 {
		return nil, nil
	}
	for _, e := range eps {
		if e.Requests <= 0 {
			continue
		}
		switch s := e.Slow / e.Requests; {
		case s >= stalledShare*top:
			stalled = append(stalled, e.Endpoint)
		case e.Requests*top < minExpectedSlow:
			// Too few requests to tell: had it stalled like the others,
			// it might still show no slow request.
		case s <= unaffectedShare*top:
			unaffected = append(unaffected, e.Endpoint)
		default:
			return nil, nil
		}
	}
	if len(unaffected) == 0 {
		return nil, nil
	}
	return stalled, unaffected
}

// endpointClause says which endpoints the stalls hold up when they
// concentrate on some: "; stalls on /checkout only; /search, /feed and
// /profile unaffected". "" when every endpoint stalls alike (a host-wide
// stall) or the requests are gone. Long lists end in "and N more".
func endpointClause(p Pattern) string {
	stalled, unaffected := stalledEndpoints(p.Endpoints)
	if stalled == nil {
		return ""
	}
	return "; stalls on " + shortAndList(stalled, 3) + " only; " + shortAndList(unaffected, 4) + " unaffected"
}

// shortAndList is AndList of the first n of v, and "N more" after them.
func shortAndList(v []string, n int) string {
	if len(v) <= n {
		return AndList(v)
	}
	return strings.Join(v[:n], ", ") + " and " + fmt.Sprint(len(v)-n) + " more"
}
