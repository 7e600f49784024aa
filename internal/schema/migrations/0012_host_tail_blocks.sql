-- host_tail_blocks: the host tails' refresh (host_tails) in parts of five
-- minutes, each computed once from latency_1m's digests and read back by
-- every later refresh whose six hours hold it
-- (pipelines/services/detect/tails.go): a refresh then reads latency_1m
-- only for the minutes no block holds yet, not six hours of every host's
-- digests each time. A block is kept once it ended 15 minutes before the
-- refresh that computed it (the detector's pad): minutes that reach the
-- store later than that are not in it.
--
-- refreshed_at is the wall clock of the insert, and the TTL runs on it, as
-- host_tails' does: block is data time.
CREATE TABLE IF NOT EXISTS {{.Local "host_tail_blocks"}}{{.OnCluster}}
(
    service        LowCardinality(String),
    host           LowCardinality(String),
    block          DateTime('UTC') COMMENT 'the block''s first second; it spans 5 minutes',
    n              UInt64 COMMENT 'requests (weighted)',
    mins           AggregateFunction(uniqExact, DateTime('UTC')) COMMENT 'the minutes with data',
    first          UInt32 COMMENT 'the first minute with data, unix seconds',
    last           UInt32 COMMENT 'the last minute with data, unix seconds',
    digest         AggregateFunction(quantilesTDigestWeighted(0.5, 0.9, 0.99, 0.999), UInt32, UInt32),
    p90            Float64 COMMENT 'the block''s p90, from digest (finalized once, here)',
    p99            Float64 COMMENT 'the block''s p99',
    usable_minutes UInt64 COMMENT 'minute rows of 100 requests or more',
    minute_p90s    Array(Float64) COMMENT 'the p90 of each of those',
    minute_p99s    Array(Float64) COMMENT 'the p99 of each of those',
    refreshed_at   DateTime('UTC') DEFAULT now()
)
ENGINE = {{.Engine "ReplacingMergeTree" "host_tail_blocks" "refreshed_at"}}
ORDER BY (service, block, host)
TTL refreshed_at + INTERVAL 2 DAY;

{{.Distributed "host_tail_blocks" "cityHash64(host)"}};
