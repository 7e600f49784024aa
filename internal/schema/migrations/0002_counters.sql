-- counters: kernel counters, one row per metric × dimensions × measured
-- interval (OTLP delta Sums). Rates are value / interval_ms, never value /
-- the nominal sampling period (under load a 1 s sampler has run every
-- 2–3 s; docs/field-stories.md). Comments are not in the checksum.
CREATE TABLE IF NOT EXISTS {{.Local "counters"}}{{.OnCluster}}
(
    -- Samplers run on a steady cadence, so within one series consecutive
    -- starts differ by about the same step: DoubleDelta stores a few bits.
    ts_start     DateTime64(6, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    interval_ms  UInt32 COMMENT 'measured length of the interval the delta covers' CODEC(T64, ZSTD(1)),
    host         LowCardinality(String) CODEC(ZSTD(1)),
    metric       LowCardinality(String) COMMENT 'OTel semconv name where one exists, else spikehunt.*' CODEC(ZSTD(1)),
    cpu          Int16 COMMENT 'logical CPU number; -1 = not per-CPU' CODEC(T64, ZSTD(1)),
    device       LowCardinality(String) COMMENT 'IRQ, NIC or disk name; empty if none' CODEC(ZSTD(1)),
    mode         LowCardinality(String) COMMENT 'cpu.mode (incl. softirq), direction, softirq vector…; empty if none' CODEC(ZSTD(1)),
    -- Deltas of one series are mostly zero (drops, pause frames) or change
    -- slowly: Gorilla's XOR encoding stores those in a bit or two.
    value        Float64 COMMENT 'delta over the interval' CODEC(Gorilla, ZSTD(1)),
    attrs        Map(LowCardinality(String), String) COMMENT 'anything else, e.g. operstate' CODEC(ZSTD(1))
)
-- Plain MergeTree, deduplicated by insert token like requests.
ENGINE = {{.Engine "MergeTree" "counters"}}
PARTITION BY toDate(ts_start)
-- Queries are "one host, one metric family, a time range" (the per-CPU
-- softirq heatmap, interrupts per CPU by device, one NIC's counters, a
-- spike's suspects). Series dimensions before ts_start keep each series
-- contiguous, which is what makes DoubleDelta and Gorilla pay off; mode
-- comes first among them because cpu.mode / softirq vector is the usual
-- filter (softirq, NET_RX).
ORDER BY (host, metric, mode, device, cpu, ts_start)
-- Counters explain spikes; past the suspect look-back they are rarely read.
TTL ts_start + INTERVAL {{.CountersTTLDays}} DAY
SETTINGS ttl_only_drop_parts = 1, {{.Dedup}};

-- By host, like requests: a spike's latency and its suspects' counters sit
-- on the same shard.
{{.Distributed "counters" "cityHash64(host)"}};
