package detect

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/internal/store"
)

// endpointLoad is a fleet of 20 hosts over an hour as the agent keeps a
// few requests per second: one sampled request per host and second,
// weighing 30, on /checkout or /search in turn, lognormal around 4 ms with
// shape sigma; then the extra kept (weight 1) requests of extra, each
// (host, second, endpoint, arrival offset in ms, latency in µs).
func endpointLoad(t *testing.T, st store.Store, sigma float64, extra []extraRequest) {
	t.Helper()
	ctx := context.Background()
	q := fmt.Sprintf(`INSERT INTO requests (ts, service, host, hw_class, endpoint, latency_us, status, trace_id, span_id, thread_id, weight)
SELECT fromUnixTimestamp64Micro(toInt64((%[1]d + s) * 1000000 + 100000), 'UTC'), 'billy',
    concat('host-', leftPad(toString(h), 3, '0')), if(h %% 2 = 0, 'gen4', 'gen5'), ['/checkout', '/search'][(s + h) %% 2 + 1],
    toUInt32(4000 * exp(%[2]g * sqrt(-2 * log((cityHash64(n, 7, 1) %% 1000000 + 1) / 1000001))
        * cos(2 * pi() * (cityHash64(n, 7, 2) %% 1000000) / 1000000))),
    'OK', '', '', 1000 + h, 30
FROM (SELECT number AS n, intDiv(number, 20) AS s, number %% 20 AS h FROM numbers(72000))`, dataStart.Unix(), sigma)
	if err := st.Exec(ctx, q); err != nil {
		t.Fatal(err)
	}
	for _, r := range extra {
		q := fmt.Sprintf(`INSERT INTO requests (ts, service, host, hw_class, endpoint, latency_us, status, trace_id, span_id, thread_id, weight)
VALUES (fromUnixTimestamp64Micro(%d, 'UTC'), 'billy', %s, %s, %s, %d, 'OK', '', '', 1, 1)`,
			sec(r.s).UnixMicro()+int64(r.atMS)*1000, store.QuoteString(host(r.h)), store.QuoteString([]string{"gen4", "gen5"}[r.h%2]),
			store.QuoteString(r.endpoint), r.us)
		if err := st.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// One row per second, as the background merges leave it: a second
	// whose slow request is alone in its part reads, until merged, as if
	// it held no fast request.
	if err := st.Exec(ctx, "OPTIMIZE TABLE latency_1s FINAL"); err != nil {
		t.Fatal(err)
	}
}

type extraRequest struct {
	h, s     int
	endpoint string
	atMS, us int
}

// A stall of /checkout's dependency holds one request of host 3 for
// 600 ms, in a second whose sampled /search request weighs 30: the host's
// mean for the second is (30 × 4 + 600) / 31 ≈ 23 ms, under both the 25 ms
// floor and 8 × 4 ms, and one slow request is too few for the share rule.
// The host's per-second figures miss it; its endpoint's requests do not.
func TestAStallOfOneEndpointDilutedByTheHostsOtherRequestsIsASpikeWindow(t *testing.T) {
	ctx := context.Background()
	st := migrated(t)
	endpointLoad(t, st, 0.25, []extraRequest{{h: 3, s: 1805, endpoint: "/checkout", atMS: 300, us: 600_000}})
	res, err := Pass(ctx, st, Config{Service: "billy", From: dataStart, To: sec(3600)})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]window{{host(3), 1805, 1806}}, windowsOf(readSpikes(t, st, "billy"))); diff != "" {
		t.Fatalf("windows (-want +got):\n%s", diff)
	}
	if w := res.Spikes[0]; w.Endpoint != "/checkout" || w.PeakUS != 600_000 || w.Score < 1 || w.BaselineUS < 3000 || w.BaselineUS > 6000 {
		t.Errorf("window %+v: want it found on /checkout, the 600 ms peak, score ≥ 1, a baseline near 4 ms", w)
	}
	if res.EndpointsJudged != 2 || res.EndpointsDropped != 0 {
		t.Errorf("judged %d endpoints, dropped %d; want 2 and 0", res.EndpointsJudged, res.EndpointsDropped)
	}
	// Off, the stage finds nothing: the window is the endpoint stage's.
	res, err = Pass(ctx, st, Config{Service: "billy", From: dataStart, To: sec(3600), Endpoints: EndpointConfig{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Spikes) != 0 || len(res.Retracted) != 1 {
		t.Errorf("with the endpoint stage off: %d windows, %d retracted; want none and the endpoint window retracted", len(res.Spikes), len(res.Retracted))
	}
}

// On a wide body (σ = 0.9: p99 8× the median), requests of 400 ms, 100×
// the median, happen now and then. Two of one endpoint that finish within
// a few milliseconds of each other are a stall that held both; a lone one
// is the body's tail, short of e^(6σ) ≈ 220× the median.
func TestSlowRequestsOfOneEndpointThatFinishTogetherAreAStallALoneOneIsTheTail(t *testing.T) {
	ctx := context.Background()
	st := migrated(t)
	endpointLoad(t, st, 0.9, []extraRequest{
		{h: 3, s: 1805, endpoint: "/checkout", atMS: 100, us: 500_000}, // ends at 600 ms
		{h: 3, s: 1805, endpoint: "/checkout", atMS: 250, us: 352_000}, // ends at 602 ms: together
		{h: 5, s: 2405, endpoint: "/checkout", atMS: 100, us: 500_000}, // alone
		{h: 7, s: 2705, endpoint: "/checkout", atMS: 100, us: 500_000}, // ends at 600 ms
		{h: 7, s: 2705, endpoint: "/search", atMS: 250, us: 352_000},   // another endpoint: not together
	})
	res, err := Pass(ctx, st, Config{Service: "billy", From: dataStart, To: sec(3600)})
	if err != nil {
		t.Fatal(err)
	}
	var got []window
	for _, w := range res.Spikes {
		if w.Endpoint != "" {
			got = append(got, window{w.Host, int(w.Start.Sub(dataStart).Seconds()), int(w.End.Sub(dataStart).Seconds())})
		}
	}
	if diff := cmp.Diff([]window{{host(3), 1805, 1806}}, got); diff != "" {
		t.Errorf("windows found per endpoint (-want +got):\n%s", diff)
	}
}

// An app that puts ids into its routes has one endpoint per id: 100,000
// of them over the hour. The pass judges the 100 with the most requests,
// counts the others as dropped, and still finds a stall of a busy one.
func TestAServiceWithAHundredThousandEndpointsIsCappedAndTheRestCounted(t *testing.T) {
	ctx := context.Background()
	st := migrated(t)
	endpointLoad(t, st, 0.25, []extraRequest{{h: 3, s: 1805, endpoint: "/checkout", atMS: 300, us: 600_000}})
	q := fmt.Sprintf(`INSERT INTO requests (ts, service, host, hw_class, endpoint, latency_us, status, trace_id, span_id, thread_id, weight)
SELECT fromUnixTimestamp64Micro(toInt64(%d + number %% 3600) * 1000000 + 700000, 'UTC'), 'billy', 'host-000', 'gen4',
    concat('/orders/', toString(number)), 4000, 'OK', '', '', 1, 1
FROM numbers(100000)`, dataStart.Unix())
	if err := st.Exec(ctx, q); err != nil {
		t.Fatal(err)
	}
	res, err := Pass(ctx, st, Config{Service: "billy", From: dataStart, To: sec(3600)})
	if err != nil {
		t.Fatal(err)
	}
	if res.EndpointsJudged != DefaultMaxEndpoints || res.EndpointsDropped != 100_002-DefaultMaxEndpoints {
		t.Errorf("judged %d endpoints, dropped %d; want %d and %d", res.EndpointsJudged, res.EndpointsDropped,
			DefaultMaxEndpoints, 100_002-DefaultMaxEndpoints)
	}
	if diff := cmp.Diff([]window{{host(3), 1805, 1806}}, windowsOf(readSpikes(t, st, "billy"))); diff != "" {
		t.Errorf("windows (-want +got):\n%s", diff)
	}
}

func TestEndpointWindowsJoinTheHostWindowsTheyTouch(t *testing.T) {
	at := func(s int) time.Time { return dataStart.Add(time.Duration(s) * time.Second) }
	w := func(h string, from, to int, ep string) SpikeWindow {
		return SpikeWindow{ID: fmt.Sprintf("%s@%d", h, from), Host: h, Start: at(from), End: at(to), Endpoint: ep, PeakUS: uint32(1000 * (to - from))}
	}
	hostWindows := []SpikeWindow{w("a", 100, 101, ""), w("b", 100, 130, "")}
	eps := []SpikeWindow{
		w("a", 104, 105, "/x"), // within the 5 s gap of a's window: the same stall
		w("a", 200, 201, "/x"),
		w("a", 203, 204, "/y"), // within 5 s of the one before: merged into it
		w("b", 110, 111, "/x"), // inside b's window
		w("c", 50, 51, "/x"),   // starts before writeFrom: left alone
		w("c", 300, 302, "/x"),
	}
	got := withEndpointWindows(hostWindows, eps, 5*time.Second, at(60))
	var ids []string
	for _, x := range got {
		ids = append(ids, fmt.Sprintf("%s %v-%v %s", x.ID, x.Start.Sub(dataStart), x.End.Sub(dataStart), x.Endpoint))
	}
	want := []string{"a@100 1m40s-1m41s ", "a@200 3m20s-3m24s /x,/y", "b@100 1m40s-2m10s ", "c@300 5m0s-5m2s /x"}
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Errorf("windows (-want +got):\n%s", diff)
	}
}
