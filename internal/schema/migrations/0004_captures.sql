-- captures: the index of uploaded flight-recorder captures, one row per
-- capture, linked to every spike window it overlaps on its host. The row
-- is first written when the capture fires (the window is then known and it
-- is part of the key); the Armed phase lives in the Capture object only.
-- Later phases (uploaded, indexed, failed) write the row again with a newer
-- updated_at, which ReplacingMergeTree keeps. Read with FINAL. A small
-- table: default codecs.
CREATE TABLE IF NOT EXISTS {{.Local "captures"}}{{.OnCluster}}
(
    capture_id    String,
    host          LowCardinality(String),
    node          LowCardinality(String) COMMENT 'Kubernetes node name',
    backend       LowCardinality(String) COMMENT 'perf, ftrace, bpftrace or wpr',
    profile       LowCardinality(String),
    window_start  DateTime64(3, 'UTC'),
    window_end    DateTime64(3, 'UTC'),
    trigger       LowCardinality(String) COMMENT 'what fired it: local threshold, local p99, fleet alert, manual',
    spike_ids     Array(String),
    uri           String COMMENT 'content-addressed artifact location',
    bytes         UInt64,
    lost_events   UInt64 COMMENT 'events the ring dropped or overwrote, never hidden',
    checksum      String,
    status        LowCardinality(String),
    created_at    DateTime64(3, 'UTC'),
    updated_at    DateTime64(3, 'UTC')
)
ENGINE = {{.Engine "ReplacingMergeTree" "captures" "updated_at"}}
PARTITION BY toYYYYMM(window_start)
-- The captures index and the host drill-down ask "captures of this host
-- overlapping this time range"; capture_id makes the key unique.
ORDER BY (host, window_start, capture_id)
-- The index outlives most artifacts; the operator's retention deletes those.
TTL window_start + INTERVAL {{.CapturesTTLDays}} DAY;

-- By host, with the spikes it indexes.
{{.Distributed "captures" "cityHash64(host)"}};
