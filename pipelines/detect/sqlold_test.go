package detect

import (
	"fmt"
	"time"

	"github.com/spikehunt/spikehunt/pipelines/store"
)

// The statements as they were rendered before they were templates, with
// numbered fmt verbs: sql_equiv_test.go checks the templates give the same
// text.

func oldSpikeWindowsSQL(service string, r spikeRange, c SpikeConfig, materialized bool) string {
	bucket := int64(c.Bucket / time.Second)
	floor := c.Floor.Microseconds()
	first := "toUInt32(0)"
	if !r.fleetFrom.IsZero() {
		first = fmt.Sprintf("minIf(toUInt32(ts), ts >= %s)", secLit(r.fleetFrom))
	}
	cte := ""
	if materialized {
		cte = "MATERIALIZED "
	}
	return fmt.Sprintf(`
WITH buckets AS %[14]s(
    SELECT host, hw, b, first, typical, thr, base,
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
            greatest(%[3]d, greatest(%[4]s, exp(%[11]s * ifNotFinite(quantileExactWeightedIf(0.5)(spread, n, spread < %[13]s) OVER (PARTITION BY b), 0))) * base) AS thr
        FROM (
            SELECT host, hw, b, first, n, secs, cand,
                if(lagInFrame(b) OVER w = b - 1 AND n * 2 < lagInFrame(n) OVER w,
                   lagInFrame(geo) OVER w, geo) AS host_base,
                -- The lesser of this bucket's and the previous one's: a
                -- fleet-wide 30 s stall widens one or two buckets' spread.
                if(lagInFrame(b) OVER w = b - 1, least(sd, lagInFrame(sd) OVER w), sd) AS spread
            FROM (
                SELECT host, hw_class AS hw,
                    -- The bucket's number, not its start: intDiv(ts, n) is
                    -- monotonic in the sort key and keeps the aggregation in
                    -- order; intDiv(ts, n) * n is not recognised as such.
                    intDiv(toUInt32(ts), %[5]d) AS b,
                    exp(avg(log(greatest(1, weighted_sum_us / weighted_count)))) AS geo,
                    -- A spread needs two minutes of seconds: over ten, one
                    -- stalled second is the spread.
                    if(count() >= %[12]d, stddevPop(log(greatest(1, weighted_sum_us / weighted_count))), %[13]s) AS sd,
                    sum(weighted_count) AS n,
                    max(toUInt32(ts)) - min(toUInt32(ts)) + 1 AS secs,
                    %[10]s AS first,
                    groupArrayIf((toUInt32(ts), max_us, weighted_sum_us, weighted_count, kept_count),
                        ts >= %[6]s AND max_us > %[3]d) AS cand
                FROM latency_1s
                WHERE service = %[1]s AND ts >= %[7]s AND ts < %[8]s
                GROUP BY host, hw_class, b
            )
            WINDOW w AS (PARTITION BY host ORDER BY b ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
        )
    )
)
SELECT toString(host) AS host, toString(hw) AS hw_class, toInt64(first) AS first_s,
    arrayFilter(x -> x.1 >= %[9]d, arrayMap(w -> (
        toInt64(w[1].1) * 1000,
        (toInt64(w[-1].1) + 1) * 1000,
        w[indexOf(arrayMap(x -> x.2, w), arrayMax(x -> x.2, w))]), wins)) AS ws,
    arrayMap(x -> lower(hex(cityHash64(%[1]s, toString(host), fromUnixTimestamp64Milli(x.1, 'UTC')))), ws) AS spike_ids,
    arrayMap(x -> x.1, ws) AS starts_ms,
    arrayMap(x -> x.2, ws) AS ends_ms,
    arrayMap(x -> toUInt32(x.3.2), ws) AS peaks_us,
    arrayMap(x -> toFloat64(x.3.4), ws) AS baselines_us,
    arrayMap(x -> toFloat64(x.3.2 / x.3.3), ws) AS scores
FROM (
    SELECT host, argMax(hw, b) AS hw, minIf(first, first > 0) AS first,
        arraySort(x -> x.1, arrayFlatten(groupArray(slow))) AS secs,
        arraySplit((x, gap) -> gap > %[2]d, secs, arrayDifference(arrayMap(x -> toInt64(x.1), secs))) AS wins
    FROM (
        SELECT host, hw, b, first,
            -- Of the seconds that may be, those of which a tenth or more of
            -- the requests, and three or more, took longer than thr: those
            -- over it by latency_hist's bins wholly above it, out of the
            -- second's requests (at least the bucket's mean per second).
            arrayMap(y -> y.1, arrayFilter(y ->
                arraySum((k, v) -> if(k >= ceil(8 * log2(thr)), v, 0), y.3.1, y.3.2) >= greatest(3, 0.1 * greatest(toFloat64(y.2), 2 * typical)),
                hists)) AS by_share,
            -- (second, max, threshold, base) of the slow seconds.
            arrayMap(x -> (x.1, x.2, thr, base),
                arrayFilter(x -> has(by_mean, x.1) OR has(by_share, x.1), merged)) AS slow
        FROM buckets
        LEFT JOIN (
            -- The latency histograms of the seconds that may be slow by
            -- share, and of no other: the set of (host, hw_class, ts) keys
            -- prunes the scan to the granules that hold them. A second's
            -- rows are merged (a second not merged yet is in several
            -- parts).
            SELECT host, b, groupArray((s, w, hist)) AS hists
            FROM (
                SELECT host, toUInt32(ts) AS s, intDiv(s, %[5]d) AS b, sum(weighted_count) AS w,
                    sumMap(latency_hist) AS hist
                FROM latency_1s
                WHERE service = %[1]s AND ts >= %[6]s AND ts < %[8]s
                    AND (host, hw_class, ts) GLOBAL IN (SELECT host, hw, toDateTime(arrayJoin(maybe), 'UTC') FROM buckets)
                GROUP BY host, ts
            )
            GROUP BY host, b
        ) AS q USING (host, b)
    )
    GROUP BY host
)
ORDER BY host`,
		store.QuoteString(service), int64(c.MergeGap/time.Second)+1, floor, floatLit(c.K), bucket,
		secLit(r.readFrom), secLit(r.baseFrom), secLit(r.to), r.writeFrom.UnixMilli(), first, floatLit(c.Z), minSpreadSeconds, floatLit(noSpread), cte)
}

func oldSuspectsSQL(service string, ch suspectChunk, c SuspectConfig) string {
	windows := "SELECT spike_id, host, toUnixTimestamp64Milli(window_start) AS ws, toUnixTimestamp64Milli(window_end) AS we FROM spikes WHERE " + ch.where
	hosts := strList(ch.hosts)
	slot := suspectSlot.Milliseconds()
	margin, baseline, guard := c.Margin.Milliseconds(), c.Baseline.Milliseconds(), c.Guard.Milliseconds()
	return fmt.Sprintf(`
SELECT spike_id, host, ws, metric, cpu, device, mode, base, during, deviation
FROM (
    SELECT spike_id, host, ws, metric, cpu, device, mode, base, during,
        (during - base) / greatest(mad * 1.4826, %[1]s * abs(base), floor_abs) AS raw,
        raw * multiIf(down, %[2]s, metric IN %[18]s, %[19]s, 1) AS deviation
    FROM (
        SELECT spike_id, host, ws, metric, cpu, device, mode, any(floor_abs) AS floor_abs,
            maxIf(v * 1000 / len_ms, is_during) AS during,
            groupArrayIf(v * 1000 / len_ms, is_base) AS rates,
            arrayReduce('quantileExactInclusive(0.5)', rates) AS base,
            arrayReduce('quantileExactInclusive(0.5)', arrayMap(r -> abs(r - base), rates)) AS mad,
            maxIf(down_iface, is_during) AS down
        FROM (
            SELECT w.spike_id AS spike_id, w.host AS host, w.ws AS ws, c.metric AS metric, c.cpu AS cpu, c.device AS device, c.mode AS mode,
                c.v AS v, c.len_ms AS len_ms, c.down_iface AS down_iface, c.floor_abs AS floor_abs,
                c.cs < w.we + %[3]d AND c.ce > w.ws - %[3]d AS is_during,
                c.cs >= w.ws - %[4]d AND c.ce <= w.ws - %[5]d
                    AND NOT arrayExists(o -> c.cs < o.2 + %[3]d AND c.ce > o.1 - %[3]d, w.others) AS is_base
            FROM (
                SELECT host, metric, cpu, device, mode, cs, len_ms, cs + len_ms AS ce, v, down_iface,
                    %[6]s AS floor_abs, intDiv(cs, %[7]d) AS slot
                FROM (
                    SELECT toString(host) AS host, toString(metric) AS metric, cpu,
                        multiIf(device != '' AND attrs['spikehunt.counter'] != '', concat(device, ':', attrs['spikehunt.counter']),
                                device != '', toString(device),
                                metric = 'spikehunt.pressure.stall_time', attrs['spikehunt.pressure.resource'], '') AS device,
                        toString(mode) AS mode,
                        toUnixTimestamp64Milli(ts_start) AS cs, toInt64(interval_ms) AS len_ms, value AS v,
                        metric = 'system.network.packet.count' AND mode = 'receive'
                            AND attrs['spikehunt.network.operstate'] NOT IN (%[8]s) AS down_iface
                    FROM counters
                    WHERE host IN %[9]s AND ts_start >= %[10]s AND ts_start < %[11]s AND interval_ms > 0 AND %[20]s
                        AND NOT (metric = 'system.cpu.time' AND mode = 'idle')
                    UNION ALL
                    -- Gauges (interval_ms = 0) become growth between consecutive readings.
                    SELECT host, metric, cpu, device, mode, prev_t AS cs, t - prev_t AS len_ms, value - prev_v AS v, false AS down_iface
                    FROM (
                        SELECT toString(host) AS host, toString(metric) AS metric, cpu,
                            toString(device) AS device, toString(mode) AS mode,
                            toUnixTimestamp64Milli(ts_start) AS t, value,
                            lagInFrame(t) OVER s AS prev_t, lagInFrame(value) OVER s AS prev_v, row_number() OVER s AS rn
                        FROM counters
                        WHERE host IN %[9]s AND ts_start >= %[10]s - INTERVAL 1 MINUTE AND ts_start < %[11]s AND interval_ms = 0 AND %[20]s
                        WINDOW s AS (PARTITION BY host, metric, cpu, device, mode ORDER BY ts_start ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
                    )
                    WHERE rn > 1 AND t > prev_t
                )
            ) AS c
            INNER JOIN (
                SELECT x.spike_id AS spike_id, x.host AS host, x.ws AS ws, x.we AS we, o.others AS others,
                    arrayJoin(range(intDiv(x.ws - %[4]d - %[12]d, %[7]d), intDiv(x.we + %[3]d, %[7]d) + 1)) AS slot
                FROM (%[13]s) AS x
                LEFT JOIN (
                    -- Without FINAL: an outdated version of a window only
                    -- keeps a few more intervals out of the baseline, and a
                    -- FINAL over a table that every pass rewrites costs more
                    -- than the rest of the query.
                    SELECT toString(host) AS host,
                        groupArray((toUnixTimestamp64Milli(window_start), toUnixTimestamp64Milli(window_end))) AS others
                    FROM spikes
                    WHERE service = %[14]s AND is_deleted = 0 AND host IN %[9]s
                        AND window_end > %[10]s AND window_start < %[11]s
                    GROUP BY host
                ) AS o ON x.host = o.host
            ) AS w ON c.host = w.host AND c.slot = w.slot
            WHERE is_during OR is_base
        )
        GROUP BY spike_id, host, ws, metric, cpu, device, mode
        HAVING length(rates) >= %[15]d AND countIf(is_during) > 0
    )
)
WHERE raw >= %[16]s
ORDER BY spike_id, deviation DESC, metric, mode, device, cpu
LIMIT %[17]d BY spike_id`,
		floatLit(c.RelativeFloor), floatLit(c.DownInterfaceWeight), margin, baseline, guard,
		floorExpr(), slot, notDownOperstates, hosts, msLit(ch.from), msLit(ch.to),
		maxCounterInterval.Milliseconds(), windows, store.QuoteString(service),
		c.MinBaselineIntervals, floatLit(c.MinDeviation), c.Max, strList(timeMetrics()), floatLit(c.TimeWeight), notSelfTelemetry())
}

func oldAveragedIllusionSQL(service string, from, to time.Time, fleet int) string {
	sample := ""
	if m := (fleet + illusionSampleHosts - 1) / illusionSampleHosts; m > 1 {
		sample = fmt.Sprintf(" AND cityHash64(host) %% %d = 0", m)
	}
	// Windows that started before the look-back may reach into it. The
	// spike seconds are keyed by one UInt64 (the host's hash, computed once
	// per distinct host of a LowCardinality column, xor the second): a set
	// of those is several times faster to probe than (host, second) tuples.
	return fmt.Sprintf(`SELECT sum(p_all) AS sum_all, toInt64(count()) AS minutes,
    sumIf(p_clean, isFinite(p_clean)) AS sum_clean, toInt64(countIf(isFinite(p_clean))) AS clean_minutes
FROM (
    SELECT host, hw_class, toStartOfMinute(ts) AS m,
        toFloat64(quantilesTDigestWeightedMerge(0.99)(quantiles_us)[1]) AS p_all,
        toFloat64(quantilesTDigestWeightedMergeIf(0.99)(quantiles_us,
            bitXor(cityHash64(host), toUInt64(toUInt32(ts))) NOT IN (
                SELECT bitXor(cityHash64(host), toUInt64(arrayJoin(range(toUInt32(toUnixTimestamp(window_start)), toUInt32(toUnixTimestamp(window_end))))))
                FROM spikes FINAL
                WHERE service = %[1]s AND window_start >= %[2]s AND window_start < %[3]s AND is_deleted = 0%[6]s
        ))[1]) AS p_clean
    FROM latency_1s
    WHERE service = %[1]s AND ts >= %[4]s AND ts < %[5]s%[6]s
    GROUP BY host, hw_class, m
)`, store.QuoteString(service), msLit(from.Add(-time.Hour)), msLit(to), secLit(from), secLit(to), sample)
}
