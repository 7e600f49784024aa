-- latency_1m: latency_1s rolled up to the minute, for reads that span the
-- fleet over hours (the dashboards' fleet panels at intervals of a minute
-- or more): one row per service × host × hw_class × minute, 60× fewer
-- digests to merge. Same columns and reading rules as latency_1s; the max
-- and the weighted mean are exact, the digests are merged states.
--
-- Fed from the moment this migration runs: older latency_1s data is not
-- rolled up (a backfill would not be idempotent), so ranges before it are
-- served at one-minute intervals only from latency_1s.
CREATE TABLE IF NOT EXISTS {{.Local "latency_1m"}}{{.OnCluster}}
(
    ts               DateTime('UTC') CODEC(DoubleDelta, ZSTD(1)),
    service          LowCardinality(String) CODEC(ZSTD(1)),
    host             LowCardinality(String) CODEC(ZSTD(1)),
    hw_class         LowCardinality(String) CODEC(ZSTD(1)),
    weighted_count   SimpleAggregateFunction(sum, UInt64) CODEC(T64, ZSTD(1)),
    kept_count       SimpleAggregateFunction(sum, UInt64) CODEC(T64, ZSTD(1)),
    max_us           SimpleAggregateFunction(max, UInt32) CODEC(T64, ZSTD(1)),
    weighted_sum_us  SimpleAggregateFunction(sum, UInt64) CODEC(T64, ZSTD(1)),
    quantiles_us     AggregateFunction(quantilesTDigestWeighted(0.5, 0.9, 0.99, 0.999), UInt32, UInt32) CODEC(ZSTD(1))
)
ENGINE = {{.Engine "AggregatingMergeTree" "latency_1m"}}
PARTITION BY toDate(ts)
ORDER BY (service, host, hw_class, ts)
TTL ts + INTERVAL {{.LatencyTTLDays}} DAY
SETTINGS ttl_only_drop_parts = 1, {{.Dedup}};

{{.Distributed "latency_1m" "cityHash64(host)"}};

-- Fed per insert block into latency_1s (itself fed from requests): a
-- minute split across blocks is several partial rows, merged in the
-- background and by the -Merge combinators at query time.
CREATE MATERIALIZED VIEW IF NOT EXISTS {{.Name "latency_1m_mv"}}{{.OnCluster}}
TO {{.Local "latency_1m"}}
AS SELECT
    toStartOfMinute(ts) AS ts,
    service,
    host,
    hw_class,
    sum(weighted_count) AS weighted_count,
    sum(kept_count) AS kept_count,
    max(max_us) AS max_us,
    sum(weighted_sum_us) AS weighted_sum_us,
    quantilesTDigestWeightedMergeState(0.5, 0.9, 0.99, 0.999)(quantiles_us) AS quantiles_us
FROM {{.Local "latency_1s"}}
GROUP BY service, host, hw_class, ts;
