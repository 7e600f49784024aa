package detect

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/spikehunt/spikehunt/internal/store"
)

// spikeRange is the time a pass reads and writes spike windows over.
type spikeRange struct {
	// baseFrom is the first bucket the typical latencies need: the one
	// before readFrom's (a young bucket borrows the previous bucket's, see
	// spikeWindowsSQL).
	baseFrom time.Time
	// readFrom = From − Pad: slow seconds are looked at from here.
	readFrom time.Time
	// writeFrom: windows starting at or after it are written, and rows
	// starting at or after it that the pass does not write are retracted.
	// A window starting closer than MergeGap + 1 s to readFrom may have
	// begun before it, unseen, so the pass leaves those alone.
	writeFrom time.Time
	to        time.Time
	// fleetFrom, when not zero, is the start of the pattern look-back,
	// which the scan covers: it also notes which hosts have data in
	// [fleetFrom, to) and from when, sparing the patterns a second scan
	// (fleetOf). A live pass reads a few minutes and leaves it zero.
	fleetFrom time.Time
	// tailsAt is the host_tails row set the company bars come from
	// (tailsAt, set by findSpikeWindows).
	tailsAt time.Time
}

func newSpikeRange(cfg *Config) spikeRange {
	c := cfg.Spikes
	readFrom := cfg.From.Add(-c.Pad)
	bucket := int64(c.Bucket / time.Second)
	first := readFrom.Unix() / bucket * bucket
	r := spikeRange{
		baseFrom:  time.Unix(first-bucket, 0).UTC(),
		readFrom:  readFrom,
		writeFrom: readFrom.Add(c.MergeGap + time.Second),
		to:        cfg.To,
	}
	if lookback := cfg.To.Add(-cfg.Patterns.Lookback); !lookback.Before(r.baseFrom) {
		r.fleetFrom = lookback
	}
	return r
}

// spikeWindowsSQL finds the spike windows of one service in one query,
// one scan of latency_1s in its sort order (optimize_aggregation_in_order:
// no hash table over hosts and seconds) grouped by host and bucket, then
// per bucket the fleet's base, the threshold and the slow seconds, and per
// host the windows, split at gaps with arraySplit: one row per host seen,
// its windows as arrays. Nothing goes row by row through Go.
//
// What is compared: a second's weighted mean latency (Σ latency × weight /
// Σ weight), against k × base. Not its max: the agent keeps every request
// above its rolling p99, so a second's max is the slowest of dozens of
// requests and, on a lognormal body with σ = 0.5, passes 8 × the median on
// every host every minute or two; a stall holds up a good share of a
// second's requests and moves its mean by orders of magnitude. The max is
// still the window's peak.
//
// Or by share: a tenth or more of the second's requests (and three or
// more) took longer than the threshold, counted in the second's histogram
// of always-kept requests (latency_hist, bins of 1/8 octave; only bins
// wholly above the threshold count; the sampled fast requests are below
// the agent's p99, far under any threshold) out of the second's requests,
// at least the bucket's mean per second. That is its p90 over the
// threshold, exactly (to a bin), where the t-digest cannot say it: a
// short stall, or one split across two seconds, or one that holds only
// the requests doing IO, leaves the fast sample (which carries the weight of dozens of requests)
// in the mean, which then rises by a few times only, while a tenth or
// more of the second's requests stalled; but a digest interpolates
// between such a sample and the slow requests next to it, so a second
// with two fast samples and three tail requests reads a p90 near its
// slowest, and one with only five tail requests (no fast sample that
// second) reads its p90 at the slowest of the five — on a 300-host fleet,
// a spike or two in a healthy three hours.
//
// The histograms are read in a second scan, only for the seconds that may
// be slow by share: not slow by their mean, with a request over the
// threshold and kept requests enough to hold a tenth of the second's (the
// slow ones are all kept). Which ones those are is known only once the
// buckets' thresholds are, so the buckets are a materialized CTE: computed
// once, then joined with the histograms of their candidates, whose (host,
// hw_class, ts) keys prune that scan to the granules holding them. A stall
// is slow by its mean and costs no histogram read; the histograms of
// every second with kept requests would be most of a full pass, since
// stalls put kept requests in every granule.
//
// Only seconds with a row over the floor can be slow (a mean is at most
// the max), so the scan keeps just those as an array per group. Rows of
// one second arrive in several inserts until ClickHouse merges them (the
// array is merged per second with sumMap and maxMap), and the fast part of
// a second is not among the kept rows, so a second's mean is taken over at
// least half a typical second's requests (the bucket's requests per
// second): a part holding only its slowest request must not pass for a
// stalled second.
//
// The base of a bucket:
//   - the host's: the geometric mean of its per-second means — a robust
//     enough centre (a 30 s stall at 250× in a 10-minute bucket moves it by
//     a third, a 1 s stall by 1%), at a fraction of the cost of merging
//     every second's t-digest (on 24 h × 1,000 hosts, 1.7 s of CPU against
//     about 7 s). A bucket holding less than half the requests of the
//     previous one (the young bucket a live pass is in, a host that just
//     came up) borrows the previous bucket's base: 20 s of a bucket that
//     are all a stall must not make the stall the norm.
//   - the fleet's: the median of the hosts' bases weighted by their
//     requests.
//   - base = max(fleet's, host's): a host slower than the fleet by nature
//     is judged by its own norm, a faster one by the fleet's.
//
// The multiplier is K, or e^(Z × spread) when that is more: spread is the
// hosts' median (by requests) of the standard deviation of log per-second
// mean latency in the bucket, the lesser of the bucket's and the previous
// one's, counting only buckets of two minutes of data or more (no spread:
// K alone). A service whose quiet seconds range widely (a lognormal body with
// σ = 0.9 peaks near 25× its geometric mean every ten minutes) must not
// report its own body as spikes. Stalls barely move the spread: a 1 s
// stall at 100× in a 10-minute bucket adds 0.03 to its variance.
//
// Company, from each host's own tail. A stall delays every request in
// flight, and they finish together at its end; a body's tail request has
// no company. So a second slow by its mean is a stall only when it and the
// seconds either side hold two requests or more over bar_pair, or one over
// bar_lone. A mean alone is not enough: a host that keeps every request
// (an agent at a few requests a second, or a fleet that sends every span)
// has one tail request in its second's mean, and on a lognormal body with
// σ = 0.9 at 5 requests a second that passes 8 × its base some 1.6 times
// per host-hour.
//
// The bars come from the host's own latency over the six hours before To
// (host_tails, computed at most every tailRefresh: tails.go): its p99,
// the slope of its tail (log latency per standard normal quantile,
// between p90 and p99, which is σ on a lognormal body and the misses' σ
// on a body of cache hits and misses) and its rate r. bar_lone is the latency its body exceeds once in
// 3 / FalsePerHostHour host-hours: a tail share S = F / 3600 / r, F =
// FalsePerHostHour / 3, at the normal quantile z(S), p99 × e^(slope ×
// (z(S) − z(0.99))). bar_pair is where two requests within two seconds of
// one another come as rarely: tail events at rate λ = r S pair up 2λ²
// times a second, so S = √(F / 7200) / r. Both stay at or over thr. p90
// and p99 stand clear of the host's own stalls, which hold far fewer than
// one request in a hundred (a 1 s stall every 15 minutes: one in 900), or
// else are its median minute's (tails.go). A host with fewer than
// minTailRequests requests or minTailMinutes minutes of data in those
// hours (one just come up) has the fleet's pooled p99 and slope instead,
// at its own rate (tails.go's fleet row). Only a fleet in its first
// minutes (fewer than minTailRequests pooled requests, or fewer than
// fleetTailMinutes minutes) has the fleet's spread bars: bar_pair =
// max(thr, e^(pairZ × tail) × base), bar_lone = max(loneOverPair ×
// bar_pair, e^(loneZ × tail) × base), tail being the fleet's spread of
// log per-second means over buckets of minTailSeconds rows or more. Those
// know the spread of a second's mean, not how far one request reaches: on
// σ = 1.2 at one request a second they put bar_lone near 50 × the median,
// a fifth of the body's own, and gave 4 false windows in the first 10
// minutes of 50 hosts, more than the three hours after them allowed.
//
// The share rule counts over the share bar: thr, or on a host with a tail
// of its own the latency of which its body puts k = max(3, a tenth of n)
// of a second's n requests over it once in 1 / F host-hours (Poisson:
// (n S)^k / k! per second), if that is higher: at σ = 1.2 and 100 requests
// a second a tenth of them pass 8 × the base, by the body alone, a few
// times an hour.
//
// Company is counted in latency_hist, read in the histograms' scan for
// the slow seconds and their neighbours (few); a second whose own max
// passes bar_lone needs no read, which is most stalls at tens of requests
// a second.
func spikeWindowsSQL(service string, r spikeRange, c SpikeConfig, materialized bool) string {
	return render(spikeWindowsTmpl, spikeWindowsParams{
		Service:          service,
		FloorUS:          c.Floor.Microseconds(),
		K:                c.K,
		Z:                c.Z,
		BucketS:          int64(c.Bucket / time.Second),
		SplitGapS:        int64(c.MergeGap/time.Second) + 1,
		MinSpreadSeconds: minSpreadSeconds,
		MinTailSeconds:   minTailSeconds,
		NoSpread:         noSpread,
		PairZ:            pairZ,
		LoneZ:            loneZ,
		LoneOverPair:     loneOverPair,
		TailsAt:          r.tailsAt,
		MinTailRequests:  minTailRequests,
		MinTailMinutes:   minTailMinutes,
		FleetHost:        fleetTailHost,
		FleetTailMinutes: fleetTailMinutes,
		FalseThird:       c.FalsePerHostHour / 3,
		Z99:              z99,
		BaseFrom:         r.baseFrom,
		ReadFrom:         r.readFrom,
		WriteFromMS:      r.writeFrom.UnixMilli(),
		To:               r.to,
		FleetFrom:        r.fleetFrom,
		Materialized:     materialized,
	})
}

// spikeWindowsParams are the values spikeWindowsTmpl names.
type spikeWindowsParams struct {
	Service string
	// FloorUS is SpikeConfig.Floor in µs, as max_us is.
	FloorUS int64
	K, Z    float64
	// BucketS is the bucket's length in seconds: a second ts is in bucket
	// intDiv(ts, BucketS).
	BucketS int64
	// SplitGapS: slow seconds further apart than this are two windows
	// (MergeGap + 1 s: seconds MergeGap apart, fast ones between, merge).
	SplitGapS        int64
	MinSpreadSeconds int64
	NoSpread         float64
	// The fleet's bars, for a host without a tail of its own (see
	// spikeWindowsSQL).
	MinTailSeconds int64
	PairZ, LoneZ   float64
	LoneOverPair   float64
	// The host's own tail: host_tails at TailsAt, from MinTailRequests
	// requests in MinTailMinutes minutes on; each of the three rules may
	// give FalseThird false windows per host-hour.
	TailsAt         time.Time
	MinTailRequests int64
	MinTailMinutes  int64
	// The fleet's row of host_tails (FleetHost) stands for a host without
	// a tail of its own from MinTailRequests requests in
	// FleetTailMinutes minutes on.
	FleetHost        string
	FleetTailMinutes int64
	FalseThird       float64
	// The standard normal's quantiles at 0.99 and 0.90.
	Z99 float64
	// The seconds of spikeRange: the scan reads [BaseFrom, To), candidate
	// slow seconds from ReadFrom on, and keeps windows starting at or
	// after WriteFromMS (ms).
	BaseFrom, ReadFrom, To time.Time
	WriteFromMS            int64
	// FleetFrom, when not zero, is where the scan notes each host's first
	// second (the pattern look-back's fleet); zero: first is 0.
	FleetFrom time.Time
	// Materialized computes the buckets CTE once (enable_materialized_cte);
	// without, a server inlines it and scans twice.
	Materialized bool
}

var spikeWindowsTmpl = sqlTemplate("spike windows", `
WITH (
    -- The fleet's tail (tails.go): p99, slope, and whether it stands for
    -- a host without its own (2,000 pooled requests or more, over
    -- FleetTailMinutes minutes or more). One row, zeros when there is
    -- none: aggregates of no row.
    SELECT (toFloat64(any(p99_us)),
        {{slope "any(p99_us)" "any(p90_us)"}},
        any(tail_n) >= {{.MinTailRequests}} AND any(minutes) >= {{.FleetTailMinutes}} AND any(p99_us) > any(p90_us) AND any(p90_us) > 0)
    FROM host_tails FINAL
    WHERE service = {{str .Service}} AND computed_to = {{sec .TailsAt}} AND host = {{str .FleetHost}}
) AS fleet_own,
tails AS (
    -- Each host's own latency (tails.go): its rate, and the slope of its
    -- tail in log latency per standard normal quantile, from p90 to p99.
    -- p99 and p90 stand clear of the host's own stalls, which hold under
    -- one request in a hundred, or are the median minute's.
    SELECT host, tail_n, rate AS t_rate, p99_us AS t_p99,
        -- Minutes enough too: in a host's first minutes its own stall is
        -- more than one request in a hundred, and would be its p99.
        tail_n >= {{.MinTailRequests}} AND minutes >= {{.MinTailMinutes}}
            AND p99_us > p90_us AND p90_us > 0 AS t_own,
        {{slope "p99_us" "p90_us"}} AS t_slope
    FROM host_tails FINAL
    WHERE service = {{str .Service}} AND computed_to = {{sec .TailsAt}} AND host != {{str .FleetHost}}
),
buckets AS {{if .Materialized}}MATERIALIZED {{end}}(
    SELECT host, hw, b, first, typical, thr, base, bar_pair, bar_lone, tailed, p99, slope, rate,
        -- Rows of one second merged (in if(), evaluated only where there
        -- can be two: most buckets have no candidate or one).
        if(length(cand) < 2, cand, arrayZip(
            (arrayReduce('sumMap', arrayMap(x -> [x.1], cand), arrayMap(x -> [x.3], cand), arrayMap(x -> [x.4], cand), arrayMap(x -> [x.5], cand)) AS sums).1,
            arrayReduce('maxMap', arrayMap(x -> [x.1], cand), arrayMap(x -> [x.2], cand)).2,
            sums.2, sums.3, sums.4)) AS merged,
        -- Slow by their mean.
        arrayMap(x -> x.1, arrayFilter(x -> x.3 / greatest(toFloat64(x.4), typical) > thr, merged)) AS by_mean,
        -- The seconds that may be slow by share, the others cannot: one
        -- request over thr at least, and kept requests enough to hold a
        -- tenth of the second's (the slow ones are all kept).
        arrayMap(x -> x.1, arrayFilter(x -> NOT has(by_mean, x.1) AND x.2 > thr
            AND x.5 >= 3 AND x.5 >= 0.1 * greatest(toFloat64(x.4), 2 * typical), merged)) AS maybe
    FROM (
        SELECT host, hw, b, first, cand, n / secs / 2 AS typical,
            greatest(host_base, quantileExactWeighted(0.5)(host_base, n) OVER (PARTITION BY b)) AS base,
            greatest({{.FloorUS}}, greatest({{float .K}}, exp({{float .Z}} * ifNotFinite(quantileExactWeightedIf(0.5)(spread, n, spread < {{float .NoSpread}}) OVER (PARTITION BY b), 0))) * base) AS thr,
            ifNotFinite(quantileExactWeightedIf(0.5)(tail, n, tail < {{float .NoSpread}}) OVER (PARTITION BY b), 0) AS fleet_tail,
            -- The company bars: from the host's own tail where it has one,
            -- else from the fleet's pooled tail where that has requests
            -- enough (the latencies the body reaches twice within three
            -- seconds, or at all, once in 1 / FalseThird host-hours, at
            -- the host's own rate: a young host's from the bucket), else
            -- from the fleet's spread (a fleet in its first minutes).
            -- The slope, at least the fleet's (the median of the hosts'
            -- with a tail): a host's p90 and p99 rest on a few thousand
            -- requests, and a slope read short lowers both bars.
            t_own OR fleet_own.3 AS tailed,
            if(t_own, t_p99, fleet_own.1) AS p99,
            if(t_own, t_rate, greatest(t_rate, n / secs)) AS rate,
            greatest(if(t_own, t_slope, fleet_own.2), ifNotFinite(quantileExactIf(0.5)(t_slope, t_own) OVER (PARTITION BY b), 0)) AS slope,
            greatest(thr, if(tailed,
                p99 * exp(slope * ({{z (printf "least(0.01, sqrt(%s / 7200) / rate)" (float .FalseThird))}} - {{float .Z99}})),
                exp({{float .PairZ}} * fleet_tail) * base)) AS bar_pair,
            if(tailed,
                greatest(bar_pair, p99 * exp(slope * ({{z (printf "least(0.01, %s / 3600 / rate)" (float .FalseThird))}} - {{float .Z99}}))),
                greatest({{float .LoneOverPair}} * bar_pair, exp({{float .LoneZ}} * fleet_tail) * base)) AS bar_lone
        FROM (
            SELECT host, hw, b, first, n, secs, cand,
                if(lagInFrame(b) OVER w = b - 1 AND n * 2 < lagInFrame(n) OVER w,
                   lagInFrame(geo) OVER w, geo) AS host_base,
                -- The lesser of this bucket's and the previous one's: a
                -- fleet-wide 30 s stall widens one or two buckets' spread.
                if(lagInFrame(b) OVER w = b - 1, least(sd, lagInFrame(sd) OVER w), sd) AS spread,
                if(lagInFrame(b) OVER w = b - 1, least(sd_tail, lagInFrame(sd_tail) OVER w), sd_tail) AS tail
            FROM (
                SELECT host, hw_class AS hw,
                    -- The bucket's number, not its start: intDiv(ts, n) is
                    -- monotonic in the sort key and keeps the aggregation in
                    -- order; intDiv(ts, n) * n is not recognised as such.
                    intDiv(toUInt32(ts), {{.BucketS}}) AS b,
                    exp(avg(log(greatest(1, weighted_sum_us / weighted_count)))) AS geo,
                    -- A spread needs two minutes of seconds: over ten, one
                    -- stalled second is the spread.
                    stddevPop(log(greatest(1, weighted_sum_us / weighted_count))) AS sd_any,
                    if(count() >= {{.MinSpreadSeconds}}, sd_any, {{float .NoSpread}}) AS sd,
                    -- The tail's spread, for the lone-request rule: a host
                    -- serving a few requests a second keeps fewer rows than
                    -- the spread wants, and it is those hosts whose quiet
                    -- seconds hold a lone request.
                    if(count() >= {{.MinTailSeconds}}, sd_any, {{float .NoSpread}}) AS sd_tail,
                    sum(weighted_count) AS n,
                    max(toUInt32(ts)) - min(toUInt32(ts)) + 1 AS secs,
                    {{if .FleetFrom.IsZero}}toUInt32(0){{else}}minIf(toUInt32(ts), ts >= {{sec .FleetFrom}}){{end}} AS first,
                    groupArrayIf((toUInt32(ts), max_us, weighted_sum_us, weighted_count, kept_count),
                        ts >= {{sec .ReadFrom}} AND max_us > {{.FloorUS}}) AS cand
                FROM latency_1s
                WHERE service = {{str .Service}} AND ts >= {{sec .BaseFrom}} AND ts < {{sec .To}}
                GROUP BY host, hw_class, b
            )
            WINDOW w AS (PARTITION BY host ORDER BY b ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
        ) AS hb
        LEFT JOIN tails USING (host)
    )
)
SELECT toString(host) AS host, toString(hw) AS hw_class, toInt64(first) AS first_s,
    arrayFilter(x -> x.1 >= {{.WriteFromMS}}, arrayMap(w -> (
        toInt64(w[1].1) * 1000,
        (toInt64(w[-1].1) + 1) * 1000,
        w[indexOf(arrayMap(x -> x.2, w), arrayMax(x -> x.2, w))]), wins)) AS ws,
    arrayMap(x -> lower(hex(cityHash64({{str .Service}}, toString(host), fromUnixTimestamp64Milli(x.1, 'UTC')))), ws) AS spike_ids,
    arrayMap(x -> x.1, ws) AS starts_ms,
    arrayMap(x -> x.2, ws) AS ends_ms,
    arrayMap(x -> toUInt32(x.3.2), ws) AS peaks_us,
    arrayMap(x -> toFloat64(x.3.4), ws) AS baselines_us,
    arrayMap(x -> toFloat64(x.3.2 / x.3.3), ws) AS scores
FROM (
    SELECT host, argMax(hw, b) AS hw, minIf(first, first > 0) AS first,
        arraySort(x -> x.1, arrayFlatten(groupArray(slow))) AS secs,
        arraySplit((x, gap) -> gap > {{.SplitGapS}}, secs, arrayDifference(arrayMap(x -> toInt64(x.1), secs))) AS wins
    FROM (
        -- (second, max, threshold, base) of the slow seconds: by mean
        -- with company, or by share.
        SELECT host, hw, b, first,
            arrayMap(x -> (x.1, x.2, thr, base),
                arrayFilter(x -> has(accompanied, x.1) OR has(by_share, x.1), merged)) AS slow
        FROM (
        -- Each step its own SELECT, and no lambda inside a lambda: the
        -- statement's analysis, a fixed cost of every pass (as much as the
        -- scan of a small fleet), grows with each.
        SELECT host, hw, b, first, thr, base, merged, by_share,
            -- Of the seconds slow by their mean, those with company: in
            -- the second and the ones either side, two requests or more
            -- over bar_pair, or one over bar_lone.
            arrayFilter(t -> has(lone_far, t)
                OR over.2[indexOf(over.1, t - 1)] + over.2[indexOf(over.1, t)] + over.2[indexOf(over.1, t + 1)] >= 2
                OR over.3[indexOf(over.1, t - 1)] + over.3[indexOf(over.1, t)] + over.3[indexOf(over.1, t + 1)] >= 1,
                by_mean) AS accompanied
        FROM (
        SELECT host, hw, b, first, thr, base, merged, by_mean,
            -- Slow by their mean with a request beyond bar_lone: company
            -- enough, no histogram read.
            arrayMap(x -> x.1, arrayFilter(x -> has(by_mean, x.1) AND x.2 >= bar_lone, merged)) AS lone_far,
            -- Of the seconds that may be, those of which a tenth or more of
            -- the requests, and three or more (k), took longer than the
            -- share bar: those over it by latency_hist's bins wholly above
            -- it, out of the second's requests (n, at least the bucket's
            -- mean per second). The share bar is thr, or on a host with a
            -- tail of its own the latency of which its body puts k of n
            -- requests over it in a second once in 1 / FalseThird
            -- host-hours, if higher (Poisson: (n S)^k / k! per second).
            {{- $n := "greatest(toFloat64(y.2), 2 * typical)"}}{{$k := printf "greatest(3, ceil(0.1 * %s))" $n}}
            arrayMap(y -> y.1, arrayFilter(y -> has(maybe, y.1) AND
                arraySum((k, v) -> if(k >= ceil(8 * log2(if(tailed, greatest(thr,
                    p99 * exp(slope * ({{z (printf "least(0.01, exp((log(%s / 3600) + lgamma(%s + 1)) / %s) / %s)" (float .FalseThird) $k $k $n)}} - {{float .Z99}}))), thr))), v, 0), y.3.1, y.3.2)
                    >= {{$k}},
                hists)) AS by_share,
            -- The seconds read, and of each its requests over bar_pair and
            -- over bar_lone (bins wholly above them): arrays a slow second
            -- looks its neighbours up in by indexOf (0, an element's
            -- default, where one was not read).
            (arrayMap(y -> y.1, hists),
                arrayMap(y -> arraySum((k, v) -> if(k >= ceil(8 * log2(bar_pair)), v, 0), y.3.1, y.3.2), hists),
                arrayMap(y -> arraySum((k, v) -> if(k >= ceil(8 * log2(bar_lone)), v, 0), y.3.1, y.3.2), hists)) AS over
        FROM buckets
        LEFT JOIN (
            -- The latency histograms of the seconds that may be slow by
            -- share, and of no other: the set of (host, hw_class, ts) keys
            -- prunes the scan to the granules that hold them. A second's
            -- rows are merged (a second not merged yet is in several
            -- parts).
            SELECT host, b, groupArray((s, w, hist)) AS hists
            FROM (
                SELECT host, toUInt32(ts) AS s, sum(weighted_count) AS w,
                    sumMap(latency_hist) AS hist
                FROM latency_1s
                WHERE service = {{str .Service}} AND ts >= {{sec .ReadFrom}} AND ts < {{sec .To}}
                    AND (host, hw_class, ts) GLOBAL IN (SELECT host, hw, toDateTime(arrayJoin(arrayConcat(maybe,
                        arrayFlatten(arrayMap(x -> [toUInt32(x.1 - 1), x.1, toUInt32(x.1 + 1)],
                            arrayFilter(x -> has(by_mean, x.1) AND x.2 < bar_lone, merged))))), 'UTC') FROM buckets)
                GROUP BY host, ts
            )
            -- A slow second's neighbour may lie in the next or the
            -- previous bucket: its histogram goes to both.
            ARRAY JOIN arrayDistinct([intDiv(toUInt32(s - 1), {{.BucketS}}), intDiv(s, {{.BucketS}}), intDiv(toUInt32(s + 1), {{.BucketS}})]) AS b
            GROUP BY host, b
        ) AS q USING (host, b)
        )
        )
    )
    GROUP BY host
)
ORDER BY host`)

// minSpreadSeconds: a host's bucket has a spread from this many seconds
// of data on; noSpread marks one without.
const (
	minSpreadSeconds = 120
	noSpread         = 1e9
)

// The fleet's company bars (spikeWindowsSQL), for a host without a tail
// of its own: bar_pair = max(thr, e^(pairZ × tail) × base), bar_lone =
// max(loneOverPair × bar_pair, e^(loneZ × tail) × base), where tail is the
// fleet's median spread of log per-second mean latency over buckets of
// minTailSeconds rows or more.
const (
	minTailSeconds = 30
	pairZ          = 2.3
	loneZ          = 3.3
	loneOverPair   = 3
)

// A host's own tail (spikeWindowsSQL, tails.go): latency_1m over
// tailLookback before the pass's end, from minTailRequests requests on (a host serving one
// request a second has it after about half an hour) in minTailMinutes
// minutes with data or more. Requests alone are not enough: at 100 a
// second a host has 2,000 in 20 s, and a 1 s stall in its first minute is
// 2 in a hundred of them, its p99, which put both company bars over the
// stall itself (the README's own-hosts test, on a host 50 s old). Over 5
// minutes a 1 s stall is 1 in 300, under the p99's 1 in 100, as is any
// stall under 3 s; a host at 5 requests a second or fewer reaches its
// 2,000 requests later than that, so the minutes hold back only faster
// hosts. 2,000 requests put a host's p99 on about twenty: its slope is
// taken at least at the fleet's median, without which a σ = 0.9 body at 3 requests a second gave 8 false
// windows in the first hour of 100 hosts, 0.03 per host-hour over three
// hours (with it, 1 window in the 300 host-hours). z90 and z99 are the
// standard normal's quantiles the slope is read between.
const (
	tailLookback    = 6 * time.Hour
	minTailRequests = 2000
	minTailMinutes  = 5
	z90             = 1.2815515655446004
	z99             = 2.3263478740408408
)

// lookbackFleet is the fleet of a pattern look-back: the hardware class of
// every host with data in it, and when the fleet's data begins (zero when
// none).
type lookbackFleet struct {
	hosts    map[string]string
	dataFrom time.Time
}

// findSpikeWindows runs spikeWindowsSQL. The fleet is nil unless r.fleetFrom
// is set. A server that does not know materialized CTEs (an older
// ClickHouse than the embedded 26.7) gets the query with the CTE inlined:
// the same windows, its main scan run twice.
func findSpikeWindows(ctx context.Context, st store.Store, service string, r spikeRange, c SpikeConfig) ([]SpikeWindow, *lookbackFleet, error) {
	at, err := tailsAt(ctx, st, service, r.readFrom.Add(c.Pad), r.to)
	if err != nil {
		return nil, nil, err
	}
	r.tailsAt = at
	out, fleet, err := scanSpikeWindows(ctx, st, service, r, c, true)
	if err != nil && (store.IsCode(err, store.CodeUnknownSetting) || store.IsCode(err, store.CodeSyntaxError)) {
		out, fleet, err = scanSpikeWindows(ctx, st, service, r, c, false)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("detect: spike windows of %s: %w", service, err)
	}
	return out, fleet, nil
}

// scanSpikeWindows runs spikeWindowsSQL once, its CTE materialized or not.
func scanSpikeWindows(ctx context.Context, st store.Store, service string, r spikeRange, c SpikeConfig, materialized bool) ([]SpikeWindow, *lookbackFleet, error) {
	opts := []store.Option{store.WithSetting("optimize_aggregation_in_order", "1")}
	if materialized {
		opts = append(opts, store.WithSetting("enable_materialized_cte", "1"))
	}
	var out []SpikeWindow
	var fleet *lookbackFleet
	if !r.fleetFrom.IsZero() {
		fleet = &lookbackFleet{hosts: map[string]string{}}
	}
	var firstSeen int64
	err := st.Query(ctx, spikeWindowsSQL(service, r, c, materialized), func(b store.Block) error {
		strs, err := columns[string](b, "host", "hw_class")
		if err != nil {
			return err
		}
		first, err := column[int64](b, "first_s")
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
			host, hw := strs[0].Row(i), strs[1].Row(i)
			if f := first.Row(i); fleet != nil && f > 0 {
				fleet.hosts[host] = hw
				if firstSeen == 0 || f < firstSeen {
					firstSeen = f
				}
			}
			starts, ends, peak, base, score := ms[0].Row(i), ms[1].Row(i), peaks.Row(i), fl[0].Row(i), fl[1].Row(i)
			for k, id := range ids.Row(i) {
				out = append(out, SpikeWindow{
					ID: id, Service: service, Host: host, HWClass: hw,
					Start: time.UnixMilli(starts[k]).UTC(), End: time.UnixMilli(ends[k]).UTC(),
					PeakUS: peak[k], BaselineUS: base[k], Score: score[k],
				})
			}
		}
		return nil
	}, opts...)
	if err != nil {
		return nil, nil, err
	}
	if fleet != nil && firstSeen > 0 {
		fleet.dataFrom = time.Unix(firstSeen, 0).UTC()
	}
	return out, fleet, nil
}

// storedWindows reads the live spike rows of service starting in [from,
// to), by host and start: what a pass compares its windows with (new or
// changed?) and retracts when it no longer produces them.
func storedWindows(ctx context.Context, st store.Store, service string, from, to time.Time) (map[windowKey]SpikeWindow, error) {
	q := fmt.Sprintf(`SELECT spike_id, toString(host) AS host, toString(hw_class) AS hw_class,
    toUnixTimestamp64Milli(window_start) AS start_ms, toUnixTimestamp64Milli(window_end) AS end_ms,
    toUInt32(peak_us) AS peak_us, baseline_us, score
FROM spikes FINAL
WHERE service = %s AND window_start >= %s AND window_start < %s AND is_deleted = 0`,
		store.QuoteString(service), msLit(from), msLit(to))
	out := map[windowKey]SpikeWindow{}
	err := st.Query(ctx, q, func(b store.Block) error {
		strs, err := columns[string](b, "spike_id", "host", "hw_class")
		if err != nil {
			return err
		}
		ms, err := columns[int64](b, "start_ms", "end_ms")
		if err != nil {
			return err
		}
		peak, err := column[uint32](b, "peak_us")
		if err != nil {
			return err
		}
		fl, err := columns[float64](b, "baseline_us", "score")
		if err != nil {
			return err
		}
		for i := 0; i < b.Rows; i++ {
			w := SpikeWindow{
				ID: strs[0].Row(i), Service: service, Host: strs[1].Row(i), HWClass: strs[2].Row(i),
				Start: time.UnixMilli(ms[0].Row(i)).UTC(), End: time.UnixMilli(ms[1].Row(i)).UTC(),
				PeakUS: peak.Row(i), BaselineUS: fl[0].Row(i), Score: fl[1].Row(i),
			}
			out[windowKey{w.Host, ms[0].Row(i)}] = w
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("detect: read stored spike windows of %s: %w", service, err)
	}
	return out, nil
}

type windowKey struct {
	host  string
	start int64 // ms
}

// writeSpikeWindows inserts ws, and the stale rows retracted (is_deleted =
// 1), as one block stamped detected_at = stamp.
func writeSpikeWindows(ctx context.Context, st store.Store, ws, stale []SpikeWindow, stamp time.Time) error {
	if len(ws)+len(stale) == 0 {
		return nil
	}
	var (
		id                              proto.ColStr
		service, host, hwClass, version = lowCardinality(), lowCardinality(), lowCardinality(), lowCardinality()
		start, end, detectedAt          = dateTime64ms(), dateTime64ms(), dateTime64ms()
		peak                            proto.ColUInt32
		baseline, score                 proto.ColFloat64
		deleted                         proto.ColUInt8
	)
	// Two loops rather than slices.Concat: a day of a large fleet is ~10⁵
	// windows, and copying them costs tens of milliseconds.
	add := func(w *SpikeWindow, retracted bool) {
		id.Append(w.ID)
		service.Append(w.Service)
		host.Append(w.Host)
		hwClass.Append(w.HWClass)
		start.Append(w.Start)
		end.Append(w.End)
		peak.Append(w.PeakUS)
		baseline.Append(w.BaselineUS)
		score.Append(w.Score)
		version.Append(DetectorVersion)
		detectedAt.Append(stamp)
		deleted.Append(b2u(retracted))
	}
	for i := range ws {
		add(&ws[i], false)
	}
	for i := range stale {
		add(&stale[i], true)
	}
	input := proto.Input{
		{Name: "spike_id", Data: &id}, {Name: "service", Data: service}, {Name: "host", Data: host},
		{Name: "hw_class", Data: hwClass}, {Name: "window_start", Data: start}, {Name: "window_end", Data: end},
		{Name: "peak_us", Data: &peak}, {Name: "baseline_us", Data: &baseline}, {Name: "score", Data: &score},
		{Name: "detector_version", Data: version}, {Name: "detected_at", Data: detectedAt}, {Name: "is_deleted", Data: &deleted},
	}
	if err := st.Insert(ctx, "spikes", input); err != nil {
		return fmt.Errorf("detect: write %d spike windows, retract %d: %w", len(ws), len(stale), err)
	}
	return nil
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
