-- host_tails: each host's latency tail as the spike detector judges its
-- stalls by (pipelines/services/detect/tails.go; docs/detection.md): its
-- requests, minutes and rate over the 6 h before computed_to, and the p90
-- and p99 of its body. The detector computes them from latency_1m's
-- digests at most every 10 minutes of data and reads them on every pass:
-- merging 6 h of digests costs seconds per 1,000 hosts, too much for a
-- pass every 30 s. A row is also the answer to "why was this stall not
-- found": the bars came from these figures.
--
-- refreshed_at is the wall clock of the insert, and the TTL runs on it:
-- computed_to is data time, which may be days old (a backfill, a replay).
CREATE TABLE IF NOT EXISTS {{.Local "host_tails"}}{{.OnCluster}}
(
    service       LowCardinality(String),
    host          LowCardinality(String),
    computed_to   DateTime('UTC') COMMENT 'the tail covers the 6 h before this',
    tail_n        UInt64 COMMENT 'requests (weighted) in those hours',
    minutes       UInt32 COMMENT 'minutes with data',
    rate          Float64 COMMENT 'requests per second',
    p90_us        Float64 COMMENT 'the body''s p90',
    p99_us        Float64 COMMENT 'the body''s p99',
    merged_p99_us Float64 COMMENT 'the p99 of all the requests; over 3x the median minute''s p99 means the host''s own stalls were its p99, and p99_us is the median minute''s',
    refreshed_at  DateTime('UTC') DEFAULT now()
)
ENGINE = {{.Engine "ReplacingMergeTree" "host_tails" "refreshed_at"}}
ORDER BY (service, computed_to, host)
TTL refreshed_at + INTERVAL 7 DAY;

{{.Distributed "host_tails" "cityHash64(host)"}};
