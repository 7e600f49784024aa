-- The detectors' output. Detectors are incremental and idempotent: a
-- re-run over a window writes rows with the same sorting key, and
-- ReplacingMergeTree keeps the one with the latest detected_at. A row that
-- a re-run no longer produces is retracted with is_deleted = 1. Read with
-- FINAL. Small tables: default codecs.

-- spikes: one row per spike window of one host.
CREATE TABLE IF NOT EXISTS {{.Local "spikes"}}{{.OnCluster}}
(
    -- A function of the sorting key, so a re-run yields the same id and
    -- captures.spike_ids stay valid. Detectors should let the default fill it.
    spike_id          String DEFAULT lower(hex(cityHash64(service, host, window_start))),
    service           LowCardinality(String),
    host              LowCardinality(String),
    hw_class          LowCardinality(String),
    -- window_start/window_end rather than start/end: END is a keyword and
    -- breaks CASE … END in dashboard queries.
    window_start      DateTime64(3, 'UTC'),
    window_end        DateTime64(3, 'UTC'),
    peak_us           UInt32,
    baseline_us       Float64,
    score             Float64,
    detector_version  LowCardinality(String),
    detected_at       DateTime64(3, 'UTC'),
    is_deleted        UInt8 DEFAULT 0
)
ENGINE = {{.Engine "ReplacingMergeTree" "spikes" "detected_at" "is_deleted"}}
-- Few rows: monthly partitions keep the part count low.
PARTITION BY toYYYYMM(window_start)
-- The identity of a spike window: a re-run that extends the window keeps
-- its start and replaces the row. Also the dashboards' "spikes of a
-- service / host in a time range".
ORDER BY (service, host, window_start)
TTL window_start + INTERVAL {{.DetectionsTTLDays}} DAY;

{{.Distributed "spikes" "cityHash64(host)"}};

-- spike_suspects: the counters on a spike's host that deviated most from
-- the host's own baseline, one row per spike × rank, so dashboards join
-- them to spikes and a re-run rewrites the same ranks.
CREATE TABLE IF NOT EXISTS {{.Local "spike_suspects"}}{{.OnCluster}}
(
    spike_id          String,
    service           LowCardinality(String),
    host              LowCardinality(String),
    window_start      DateTime64(3, 'UTC'),
    rank              UInt8 COMMENT '1 = most deviating',
    metric            LowCardinality(String),
    cpu               Int16 COMMENT '-1 = not per-CPU',
    device            LowCardinality(String),
    mode              LowCardinality(String),
    baseline          Float64 COMMENT 'rate per second over the host baseline',
    during            Float64 COMMENT 'rate per second during the spike window',
    deviation         Float64 COMMENT 'deviation score the rank is ordered by',
    detector_version  LowCardinality(String),
    detected_at       DateTime64(3, 'UTC'),
    is_deleted        UInt8 DEFAULT 0
)
ENGINE = {{.Engine "ReplacingMergeTree" "spike_suspects" "detected_at" "is_deleted"}}
PARTITION BY toYYYYMM(window_start)
-- The spike's key, then the rank: a spike's suspects are read together.
ORDER BY (service, host, window_start, rank)
TTL window_start + INTERVAL {{.DetectionsTTLDays}} DAY;

{{.Distributed "spike_suspects" "cityHash64(host)"}};

-- patterns: one row per fleet pattern per evaluation. pattern_id is stable
-- across evaluations; each look-back is a new version, a re-run of the same
-- look-back replaces it. The current state is the latest lookback_end per
-- pattern_id; the history shows how a pattern changed.
CREATE TABLE IF NOT EXISTS {{.Local "patterns"}}{{.OnCluster}}
(
    pattern_id             String,
    service                LowCardinality(String),
    class                  LowCardinality(String) COMMENT 'fleet-recurrent, fleet-synchronized or isolated-host',
    modifiers              Array(LowCardinality(String)) COMMENT 'e.g. hw-class-skewed',
    lookback_start         DateTime64(3, 'UTC'),
    lookback_end           DateTime64(3, 'UTC'),
    hosts_affected         UInt32,
    hosts_total            UInt32,
    recurrence_interval_s  Float64 COMMENT 'median per-host interval between spikes',
    regularity             Float64 COMMENT '0..1, 1 = perfectly periodic per host',
    synchronicity          Float64 COMMENT '0..1, 1 = all affected hosts spike in the same windows',
    hw_class_skew          Map(String, Float64) COMMENT 'spike rate per hardware class relative to the fleet',
    illusion_share         Float64 COMMENT 'share of the fleet-averaged p99 explained by the spike windows',
    suspects               Array(Tuple(metric LowCardinality(String), mode LowCardinality(String), device LowCardinality(String), hosts UInt32, score Float64)) COMMENT 'counters that deviate on the affected hosts',
    detector_version       LowCardinality(String),
    detected_at            DateTime64(3, 'UTC'),
    is_deleted             UInt8 DEFAULT 0
)
ENGINE = {{.Engine "ReplacingMergeTree" "patterns" "detected_at" "is_deleted"}}
PARTITION BY toYYYYMM(lookback_end)
-- "Patterns of a service", then one pattern's versions in time order.
ORDER BY (service, pattern_id, lookback_end)
TTL lookback_end + INTERVAL {{.DetectionsTTLDays}} DAY;

-- Fleet-level rows have no host: shard by service, which is in the key.
{{.Distributed "patterns" "cityHash64(service)"}};
