package detect

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
)

// Per-endpoint spike windows: a stall in a dependency of one endpoint
// (the payment gateway behind /checkout) holds up that endpoint's requests
// only. At a few requests per second per host, a second of such a stall
// holds one or two slow requests among the host's others, and latency_1s
// mixes them with the rest: a sampled fast request (weight 30) of another
// endpoint in the same second pulls the second's mean under the bar, and
// one or two slow requests are too few for the share rule. The requests
// table keeps every slow request (weight 1) with its endpoint, so this
// stage reads it, per host, endpoint and bucket:
//
//   - base: the larger of the endpoint's typical latency over the fleet and
//     on the host (weighted geometric means of the requests' latencies; the
//     host's only from EndpointConfig.MinHostRequests requests in the
//     bucket, so a young bucket whose few requests are a stall does not make
//     the stall its norm);
//   - spread σ: the fleet's weighted standard deviation of the endpoint's
//     log latency in the bucket (a lognormal body's σ; the weights undo the
//     agent's sampling);
//   - a request is slow past max(Floor, max(K, e^(PairZ·σ)) × base).
//
// A stall delays every request of the endpoint in flight on the host, and
// they all finish together at its end, however far apart they arrived; a
// lone tail request has no company. So slow requests of one host and
// endpoint whose ends fall within Together of one another are one stall
// when there are two or more and their ends are closer together than
// their arrivals (requests that arrived together and took different
// times are the body's tail, not a stall's release). A lone one is a
// stall only past max(LoneK, e^(LoneZ·σ)) × base: a latency a lognormal
// body yields about once in 10⁹ requests (LoneZ 6), and at least LoneK
// (32) times the typical one, since real bodies have fatter tails than a
// lognormal fit of their bulk says (GC pauses, cache misses). The stall's
// window is the arrival seconds of its requests, as latency_1s files
// them.
//
// Endpoint windows that overlap a host window (or come within MergeGap of
// one) are that window: a host-wide stall is found on every endpoint and
// by the host's figures, and stays one window. The others are new spike
// windows of their host (SpikeWindow.Endpoint names the endpoint).
//
// Endpoints are user input (an app may put ids into its routes): only the
// MaxEndpoints with the most requests in the range the scan reads are judged,
// and the others are counted in Result.EndpointsDropped, so a service with
// 100,000 routes costs the pass one count per route, not a window
// function over all of them.

// endpointRanksSQL ranks the service's endpoints by requests over the
// range the endpoint scan reads (from the bases' first bucket): the first
// max rows, each with how many endpoints the service has in all.
func endpointRanksSQL(service string, r spikeRange, max int) string {
	return render(endpointRanksTmpl, endpointRanksParams{Service: service, From: r.baseFrom, To: r.to, Max: max})
}

type endpointRanksParams struct {
	Service  string
	From, To time.Time
	Max      int
}

var endpointRanksTmpl = sqlTemplate("endpoint ranks", `
SELECT toString(endpoint) AS endpoint, toUInt64(sum(weight)) AS requests, toUInt64(count() OVER ()) AS endpoints
FROM requests
WHERE service = {{str .Service}} AND ts >= {{ms .From}} AND ts < {{ms .To}}
GROUP BY endpoint
ORDER BY requests DESC, endpoint
LIMIT {{.Max}}`)

// endpointWindowsSQL finds the per-endpoint stalls of one service over
// the pass's range in one scan of requests (see the comment above).
func endpointWindowsSQL(service string, endpoints []string, r spikeRange, sc SpikeConfig, ec EndpointConfig) string {
	return render(endpointWindowsTmpl, endpointWindowsParams{
		Service:         service,
		Endpoints:       endpoints,
		FloorUS:         sc.Floor.Microseconds(),
		K:               sc.K,
		PairZ:           ec.PairZ,
		LoneZ:           ec.LoneZ,
		LoneK:           ec.LoneK,
		TogetherUS:      ec.Together.Microseconds(),
		MinHostRequests: ec.MinHostRequests,
		BucketS:         int64(sc.Bucket / time.Second),
		BaseFrom:        r.baseFrom,
		ReadFrom:        r.readFrom,
		To:              r.to,
	})
}

type endpointWindowsParams struct {
	Service   string
	Endpoints []string
	FloorUS   int64
	K         float64
	// PairZ and LoneZ widen the bar by the body's spread: see
	// EndpointConfig.
	PairZ, LoneZ, LoneK float64
	// TogetherUS: slow requests whose ends are at most this far apart
	// finished together.
	TogetherUS      int64
	MinHostRequests int
	BucketS         int64
	// The scan reads [BaseFrom, To) for the bases and takes slow requests
	// from ReadFrom on.
	BaseFrom, ReadFrom, To time.Time
}

var endpointWindowsTmpl = sqlTemplate("endpoint windows", `
SELECT host, endpoint, hw_class, starts_ms, ends_ms, peaks_us, baselines_us, scores, spike_ids
FROM (
SELECT toString(host) AS host, toString(endpoint) AS endpoint, toString(any(hw)) AS hw_class,
    arraySort(x -> x.2, arrayFlatten(groupArray(slow))) AS by_end,
    -- (arrival µs, end µs, latency µs, lone bar, base, threshold) of the slow
    -- requests, cut where their ends are more than TogetherUS apart.
    arraySplit((x, gap) -> gap > {{.TogetherUS}}, by_end, arrayDifference(arrayMap(x -> x.2, by_end))) AS groups,
    -- Two or more that finished closer together than they arrived are
    -- one stall; otherwise the slowest must pass the lone bar.
    arrayFilter(g -> (length(g) >= 2 AND 2 * (g[-1].2 - g[1].2) < arrayMax(x -> x.1, g) - arrayMin(x -> x.1, g))
        OR arrayMax(x -> x.3, g) > g[1].4, groups) AS stalls,
    arrayMap(g -> toInt64(intDiv(arrayMin(x -> x.1, g), 1000000)) * 1000, stalls) AS starts_ms,
    arrayMap(g -> (toInt64(intDiv(arrayMax(x -> x.1, g), 1000000)) + 1) * 1000, stalls) AS ends_ms,
    arrayMap(g -> toUInt32(arrayMax(x -> x.3, g)), stalls) AS peaks_us,
    arrayMap(g -> toFloat64(g[1].5), stalls) AS baselines_us,
    arrayMap(g -> toFloat64(arrayMax(x -> x.3, g) / g[1].6), stalls) AS scores,
    arrayMap(s -> lower(hex(cityHash64({{str .Service}}, toString(host), fromUnixTimestamp64Milli(s, 'UTC')))), starts_ms) AS spike_ids
FROM (
    SELECT host, endpoint, hw,
        greatest({{.FloorUS}}, greatest({{float .K}}, exp({{float .PairZ}} * sigma)) * base) AS thr,
        greatest({{float .LoneK}}, exp({{float .LoneZ}} * sigma)) * base AS lone,
        arrayMap(x -> (x.1, x.1 + x.2, x.2, greatest(lone, thr), base, thr), arrayFilter(x -> x.2 > thr, cand)) AS slow
    FROM (
        SELECT host, endpoint, hw, cand,
            sum(lw) OVER f / sum(w) OVER f AS mu,
            sqrt(greatest(0, sum(l2w) OVER f / sum(w) OVER f - mu * mu)) AS sigma,
            greatest(exp(mu), if(w >= {{.MinHostRequests}}, exp(lw / w), 0)) AS base
        FROM (
            SELECT host, intDiv(toUInt32(toDateTime(ts)), {{.BucketS}}) AS b, endpoint, any(hw_class) AS hw,
                toFloat64(sum(weight)) AS w,
                sum(weight * log(greatest(latency_us, 1))) AS lw,
                sum(weight * pow(log(greatest(latency_us, 1)), 2)) AS l2w,
                groupArrayIf((toUnixTimestamp64Micro(ts), toInt64(latency_us)), ts >= {{ms .ReadFrom}} AND latency_us > {{.FloorUS}}) AS cand
            FROM requests
            WHERE service = {{str .Service}} AND ts >= {{ms .BaseFrom}} AND ts < {{ms .To}} AND endpoint IN {{strs .Endpoints}}
            GROUP BY host, b, endpoint
        )
        WINDOW f AS (PARTITION BY endpoint, b)
    )
    WHERE length(slow) > 0
)
GROUP BY host, endpoint
HAVING length(stalls) > 0
)
ORDER BY host, endpoint`)

// endpointScan is what the per-endpoint stage found in one pass over one
// service.
type endpointScan struct {
	windows []SpikeWindow // time order per host; may overlap across endpoints
	judged  int           // endpoints judged
	dropped int           // endpoints beyond EndpointConfig.MaxEndpoints
}

// findEndpointWindows runs the per-endpoint stage over r (nothing when
// it is off or the service has no requests in range).
func findEndpointWindows(ctx context.Context, st store.Store, service string, r spikeRange, sc SpikeConfig, ec EndpointConfig) (endpointScan, error) {
	var out endpointScan
	if ec.Off {
		return out, nil
	}
	endpoints, total, err := rankedEndpoints(ctx, st, service, r, ec.MaxEndpoints)
	if err != nil {
		return out, err
	}
	out.judged, out.dropped = len(endpoints), total-len(endpoints)
	if len(endpoints) == 0 {
		return out, nil
	}
	err = st.Query(ctx, endpointWindowsSQL(service, endpoints, r, sc, ec), func(b store.Block) error {
		strs, err := columns[string](b, "host", "endpoint", "hw_class")
		if err != nil {
			return err
		}
		ids, err := column[[]string](b, "spike_ids")
		if err != nil {
			return err
		}
		ms, err := columns[[]int64](b, "starts_ms", "ends_ms")
		if err != nil {
			return err
		}
		peaks, err := column[[]uint32](b, "peaks_us")
		if err != nil {
			return err
		}
		fl, err := columns[[]float64](b, "baselines_us", "scores")
		if err != nil {
			return err
		}
		for i := 0; i < b.Rows; i++ {
			starts, ends, peak, base, score := ms[0].Row(i), ms[1].Row(i), peaks.Row(i), fl[0].Row(i), fl[1].Row(i)
			for k, id := range ids.Row(i) {
				out.windows = append(out.windows, SpikeWindow{
					ID: id, Service: service, Host: strs[0].Row(i), HWClass: strs[2].Row(i), Endpoint: strs[1].Row(i),
					Start: time.UnixMilli(starts[k]).UTC(), End: time.UnixMilli(ends[k]).UTC(),
					PeakUS: peak[k], BaselineUS: base[k], Score: score[k],
				})
			}
		}
		return nil
	}, bigQuery)
	if err != nil {
		return out, fmt.Errorf("detect: per-endpoint spike windows of %s: %w", service, err)
	}
	return out, nil
}

// rankedEndpoints runs endpointRanksSQL: the endpoints to judge, most
// requests first, and how many the service has in all.
func rankedEndpoints(ctx context.Context, st store.Store, service string, r spikeRange, max int) ([]string, int, error) {
	var names []string
	total := 0
	err := st.Query(ctx, endpointRanksSQL(service, r, max), func(b store.Block) error {
		name, err := column[string](b, "endpoint")
		if err != nil {
			return err
		}
		n, err := column[uint64](b, "endpoints")
		if err != nil {
			return err
		}
		for i := 0; i < b.Rows; i++ {
			names = append(names, name.Row(i))
			total = int(n.Row(i))
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("detect: rank the endpoints of %s: %w", service, err)
	}
	return names, total, nil
}

// withEndpointWindows adds to the host windows ws (one host's in time
// order, as findSpikeWindows returns them) the endpoint windows eps that
// are not within gap of one of them: a host-wide stall is seen on its
// endpoints too and stays one window. Endpoint windows of one host within
// gap of one another (two endpoints of one stall, a stall in two parts)
// merge into the earliest, which keeps its id. Only windows starting at or
// after writeFrom are kept. The result is in host, then time order.
func withEndpointWindows(ws, eps []SpikeWindow, gap time.Duration, writeFrom time.Time) []SpikeWindow {
	if len(eps) == 0 {
		return ws
	}
	byHost := map[string][]SpikeWindow{}
	for _, w := range ws {
		byHost[w.Host] = append(byHost[w.Host], w)
	}
	sort.SliceStable(eps, func(i, j int) bool {
		if eps[i].Host != eps[j].Host {
			return eps[i].Host < eps[j].Host
		}
		return eps[i].Start.Before(eps[j].Start)
	})
	near := func(a, b SpikeWindow) bool {
		return !a.Start.After(b.End.Add(gap)) && !b.Start.After(a.End.Add(gap))
	}
	var added []SpikeWindow
	for _, e := range eps {
		absorbed := false
		for _, h := range byHost[e.Host] {
			if near(h, e) {
				absorbed = true
				break
			}
		}
		if absorbed {
			continue
		}
		if n := len(added); n > 0 && added[n-1].Host == e.Host && near(added[n-1], e) {
			last := &added[n-1]
			if e.End.After(last.End) {
				last.End = e.End
			}
			if e.PeakUS > last.PeakUS {
				last.PeakUS, last.BaselineUS, last.Score = e.PeakUS, e.BaselineUS, e.Score
			}
			if e.Endpoint != last.Endpoint && last.Endpoint != "" {
				last.Endpoint = last.Endpoint + "," + e.Endpoint
			}
			continue
		}
		added = append(added, e)
	}
	out := ws
	for _, e := range added {
		if !e.Start.Before(writeFrom) {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Host != out[j].Host {
			return out[i].Host < out[j].Host
		}
		return out[i].Start.Before(out[j].Start)
	})
	return out
}
