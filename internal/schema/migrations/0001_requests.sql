-- Per-request latency and its per-second rollup, the detectors' main input.
--
-- Timestamps are DateTime64(…, 'UTC') everywhere: toDate() partitions and
-- daily TTL drops then fall on the same boundaries whatever time zone each
-- server runs in.

-- requests: one row per kept request. Sampled requests carry weight =
-- 1/sampling rate; slow requests are always kept with weight 1, so the
-- per-second max is exact and weighted quantiles are unbiased.
CREATE TABLE IF NOT EXISTS {{.Local "requests"}}{{.OnCluster}}
(
    -- Delta, not DoubleDelta: arrivals are irregular, so second differences
    -- are as noisy as first ones; within a (service, host) run of the
    -- sorting key ts only grows, so its deltas are small.
    ts          DateTime64(6, 'UTC') CODEC(Delta, ZSTD(1)),
    service     LowCardinality(String) CODEC(ZSTD(1)),
    host        LowCardinality(String) CODEC(ZSTD(1)),
    hw_class    LowCardinality(String) CODEC(ZSTD(1)),
    endpoint    LowCardinality(String) CODEC(ZSTD(1)),
    -- UInt32 µs holds 71 minutes; T64 crops the high bits a block never uses.
    latency_us  UInt32 CODEC(T64, ZSTD(1)),
    -- A string, not UInt16: the OTLP span status (OK/ERROR/UNSET) is an enum
    -- and the HTTP status code an optional attribute; mapping both into one
    -- number would lose which is which. A per-part dictionary of a handful
    -- of values costs about what a UInt16 does.
    status      LowCardinality(String) COMMENT 'HTTP status code if the span has one (503), else the OTel span status (OK, ERROR, UNSET)' CODEC(ZSTD(1)),
    -- Raw OTLP ids. Random bytes do not compress: LZ4 is nearly free and
    -- still collapses the all-zero ids of untraced line-protocol requests.
    trace_id    FixedString(16) CODEC(LZ4),
    span_id     FixedString(8) CODEC(LZ4),
    -- Linux TIDs stay below 2^22, Windows thread ids are 32-bit.
    thread_id   UInt32 CODEC(T64, ZSTD(1)),
    -- An integer, as quantileTDigestWeighted and friends require.
    weight      UInt32 DEFAULT 1 COMMENT '1/sampling rate; 1 for always-kept slow requests' CODEC(T64, ZSTD(1))
)
-- Plain MergeTree: requests are immutable facts; a retried batch is dropped
-- by its insert_deduplication_token, not by a replacing key.
ENGINE = {{.Engine "MergeTree" "requests"}}
-- Daily partitions so the TTL drops whole days (ttl_only_drop_parts)
-- instead of rewriting parts.
PARTITION BY toDate(ts)
-- Every reader asks for one service's hosts over a time range: the host
-- drill-down (one host), the spike window's requests, exemplar traces.
ORDER BY (service, host, ts)
-- Raw requests are for drill-down only; latency_1s keeps the history.
TTL ts + INTERVAL {{.RequestsTTLDays}} DAY
SETTINGS ttl_only_drop_parts = 1, {{.Dedup}};

-- Sharded by host: a host's requests (and through the view below, its
-- latency_1s rows) live on one shard, so per-host queries touch one shard
-- and the ingest, whose Kafka partitions are keyed by host.name too, can
-- keep a batch on one shard.
{{.Distributed "requests" "cityHash64(host)"}};

-- latency_1s: service × host × hw_class × second. AggregatingMergeTree:
-- partial states from separate insert blocks are merged in the background
-- and by the -Merge combinators at query time; read it as
--   sum(weighted_count), max(max_us), sum(weighted_sum_us) / sum(weighted_count),
--   quantilesTDigestWeightedMerge(0.5, 0.9, 0.99, 0.999)(quantiles_us)
-- (any level can be read back: quantileTDigestWeightedMerge(0.95)(…)).
CREATE TABLE IF NOT EXISTS {{.Local "latency_1s"}}{{.OnCluster}}
(
    -- One-second grain: DateTime is exact and half the size of DateTime64;
    -- consecutive seconds of a series make DoubleDelta nearly free.
    ts               DateTime('UTC') CODEC(DoubleDelta, ZSTD(1)),
    service          LowCardinality(String) CODEC(ZSTD(1)),
    host             LowCardinality(String) CODEC(ZSTD(1)),
    hw_class         LowCardinality(String) CODEC(ZSTD(1)),
    weighted_count   SimpleAggregateFunction(sum, UInt64) COMMENT 'requests served: sum of weight' CODEC(T64, ZSTD(1)),
    kept_count       SimpleAggregateFunction(sum, UInt64) COMMENT 'rows kept: how many samples the quantiles rest on' CODEC(T64, ZSTD(1)),
    max_us           SimpleAggregateFunction(max, UInt32) CODEC(T64, ZSTD(1)),
    weighted_sum_us  SimpleAggregateFunction(sum, UInt64) COMMENT 'sum of latency_us × weight; mean = weighted_sum_us / weighted_count' CODEC(T64, ZSTD(1)),
    -- t-digest, not quantileTiming: quantileTiming clamps values above
    -- 30 000, i.e. 30 ms in microseconds. Digests of hosts merge into the
    -- fleet baseline the spike threshold is drawn from.
    quantiles_us     AggregateFunction(quantilesTDigestWeighted(0.5, 0.9, 0.99, 0.999), UInt32, UInt32) CODEC(ZSTD(1))
)
ENGINE = {{.Engine "AggregatingMergeTree" "latency_1s"}}
PARTITION BY toDate(ts)
-- The detectors scan one service's hosts over a window (per-host spike
-- windows, fleet baseline); the host drill-down scans one host. hw_class is
-- a function of host and must be in the key anyway, or merges would keep
-- an arbitrary value for it.
ORDER BY (service, host, hw_class, ts)
-- Longer than requests: detectors look back over weeks (recurrence,
-- hardware-class comparison) at 1/N of the raw size.
TTL ts + INTERVAL {{.LatencyTTLDays}} DAY
-- Dedup too: a retried insert into requests that failed half-way re-feeds
-- this table, which drops the block it already has.
SETTINGS ttl_only_drop_parts = 1, {{.Dedup}};

{{.Distributed "latency_1s" "cityHash64(host)"}};

-- Fed per insert block; in a cluster each server rolls up what it stores.
CREATE MATERIALIZED VIEW IF NOT EXISTS {{.Name "latency_1s_mv"}}{{.OnCluster}}
TO {{.Local "latency_1s"}}
AS SELECT
    toDateTime(ts, 'UTC') AS ts,
    service,
    host,
    hw_class,
    sum(weight) AS weighted_count,
    count() AS kept_count,
    max(latency_us) AS max_us,
    sum(toUInt64(latency_us) * weight) AS weighted_sum_us,
    quantilesTDigestWeightedState(0.5, 0.9, 0.99, 0.999)(latency_us, weight) AS quantiles_us
FROM {{.Local "requests"}}
GROUP BY service, host, hw_class, ts;
