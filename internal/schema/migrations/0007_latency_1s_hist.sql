-- latency_hist: how many of each second's slow requests took how long, by
-- eighth-octave bin (bin k holds [2^(k/8), 2^((k+1)/8)) µs, 9% wide). Slow
-- means always kept: weight 1, every request above the agent's rolling
-- p99 (requests under 1 ms are left out). It answers "what share of this
-- second's requests took longer than x?" for any x above the body, which
-- the t-digest cannot: the agent keeps the fast requests as a sample
-- weighing dozens, and a digest interpolates between such a sample and
-- the slow requests next to it, so a second with two fast samples and
-- three tail requests reads a p90 near its slowest one. The spike
-- detector counts the requests over its threshold (pipelines/services/detect,
-- spikeWindowsSQL). Most seconds have no slow request and an empty
-- histogram; the sampled fast requests stay out, or every row would carry
-- a bin or two for them (a quarter of latency_1s's compressed size on
-- the eval fleet, against a twelfth: 2.2 MiB beside 26.9 MiB).
--
-- latency_1m gets it too, summed per minute: the two tables keep the same
-- columns in the same order (the dashboards read either through one
-- UNION ALL of SELECT *). Rows written before this migration have an
-- empty histogram.
ALTER TABLE {{.Local "latency_1s"}}{{.OnCluster}}
    ADD COLUMN IF NOT EXISTS latency_hist SimpleAggregateFunction(sumMap, Tuple(Array(UInt16), Array(UInt64)))
    COMMENT 'always-kept (weight 1) requests per latency bin k = floor(8 × log2(latency_us)), from 1 ms' CODEC(ZSTD(1));

{{if .Cluster}}ALTER TABLE {{.Name "latency_1s"}}{{.OnCluster}}
    ADD COLUMN IF NOT EXISTS latency_hist SimpleAggregateFunction(sumMap, Tuple(Array(UInt16), Array(UInt64))){{end}};

-- MODIFY QUERY, not DROP and CREATE: no insert falls between the two.
ALTER TABLE {{.Name "latency_1s_mv"}}{{.OnCluster}} MODIFY QUERY
SELECT
    toDateTime(ts, 'UTC') AS ts,
    service,
    host,
    hw_class,
    sum(weight) AS weighted_count,
    count() AS kept_count,
    max(latency_us) AS max_us,
    sum(toUInt64(latency_us) * weight) AS weighted_sum_us,
    quantilesTDigestWeightedState(0.5, 0.9, 0.99, 0.999)(latency_us, weight) AS quantiles_us,
    sumMapIf([toUInt16(floor(8 * log2(greatest(latency_us, 1000))))], [toUInt64(1)], latency_us >= 1000 AND weight = 1) AS latency_hist
FROM {{.Local "requests"}}
GROUP BY service, host, hw_class, ts;

ALTER TABLE {{.Local "latency_1m"}}{{.OnCluster}}
    ADD COLUMN IF NOT EXISTS latency_hist SimpleAggregateFunction(sumMap, Tuple(Array(UInt16), Array(UInt64))) CODEC(ZSTD(1));

{{if .Cluster}}ALTER TABLE {{.Name "latency_1m"}}{{.OnCluster}}
    ADD COLUMN IF NOT EXISTS latency_hist SimpleAggregateFunction(sumMap, Tuple(Array(UInt16), Array(UInt64))){{end}};

ALTER TABLE {{.Name "latency_1m_mv"}}{{.OnCluster}} MODIFY QUERY
SELECT
    toStartOfMinute(ts) AS ts,
    service,
    host,
    hw_class,
    sum(weighted_count) AS weighted_count,
    sum(kept_count) AS kept_count,
    max(max_us) AS max_us,
    sum(weighted_sum_us) AS weighted_sum_us,
    quantilesTDigestWeightedMergeState(0.5, 0.9, 0.99, 0.999)(quantiles_us) AS quantiles_us,
    sumMap(latency_hist) AS latency_hist
FROM {{.Local "latency_1s"}}
GROUP BY service, host, hw_class, ts;
