package dashboards

// pipelineHealth is spikehunt watching itself. The agents, the ingest and
// the detector write their own figures into the counters table beside the
// kernel counters (metrics spikehunt.agent.*, spikehunt.capture.*,
// spikehunt.ingest.*, spikehunt.detect.*, spikehunt.store.*; host = the
// instance), so one data
// source answers "is the pipeline keeping up?".
func pipelineHealth() Board {
	// A gauge's last reading per instance in each interval, summed over
	// instances.
	gauge := func(metric, expr, series string) string {
		return `
SELECT time, ` + series + `, sum(last) AS value
FROM (
    SELECT $__timeInterval(ts_start) AS time, ` + expr + ` AS ` + series + `, host, argMax(value, ts_start) AS last
    FROM counters
    WHERE metric = '` + metric + `' AND $__timeFilter(ts_start)
    GROUP BY time, ` + series + `, host
)
GROUP BY time, ` + series + `
ORDER BY time, ` + series
	}
	// A delta's rate per second, summed over instances.
	deltaRate := func(metric, expr, series string) string {
		return rate(`
    SELECT $__timeInterval(ts_start) AS time, `+expr+` AS `+series+`, host AS cpu, sum(value) AS v, sum(interval_ms) / 1000 AS s
    FROM counters
    WHERE metric = '`+metric+`' AND interval_ms > 0 AND $__timeFilter(ts_start)
    GROUP BY time, `+series+`, cpu`, series)
	}
	ts := func(key, title, desc, unit, label, sql string) Panel {
		return lines(Panel{Key: key, Title: title, Description: desc, W: 12, H: 8, SQL: sql, Unit: unit, Min: ptr(0.0)}, label, 10)
	}
	return Board{
		UID: "spikehunt-pipeline", Title: "spikehunt / Pipeline health", File: "pipeline-health",
		Description: "Ingest rows/s, Kafka lag, the dead-letter queue, agent drops and spool, detector pass time and capture budget use.",
		Tags:        []string{"spikehunt"}, From: "now-6h", Refresh: "30s",
		Vars: []Var{serviceVar},
		Rows: []Row{
			{Title: "Freshness", Panels: []Panel{{
				Key: "freshness", Title: "Newest latency second, behind the range end", Type: "stat", W: 8, H: 4,
				Description: "How far the newest stored second of the service lags the end of the range: a stalled pipeline shows here first.",
				SQL: `
SELECT dateDiff('second', max(ts), least(now(), $__toTime)) AS behind_s
FROM latency_1s
WHERE ` + whereService + ` AND $__timeFilter(ts)
    -- the newest minute from the rollup, then its seconds
    AND ts >= (SELECT max(ts) FROM latency_1m WHERE ` + whereService + ` AND $__timeFilter(ts))`,
				Format: Table, Unit: "s", Options: statOptions(),
			}, {
				Key: "hosts-reporting", Title: "Hosts reporting latency", Type: "stat", W: 8, H: 4,
				SQL: `
SELECT uniqExact(host) AS hosts
FROM latency_1s
WHERE ` + whereService + ` AND ts >= $__toTime - INTERVAL 5 MINUTE AND $__timeFilter(ts)`,
				Format: Table, Unit: "short", Options: statOptions(),
			}, {
				Key: "agents-reporting", Title: "Agents reporting counters", Type: "stat", W: 8, H: 4,
				SQL: `
SELECT uniqExact(host) AS agents
FROM counters
WHERE metric = 'spikehunt.agent.spool.bytes' AND ts_start >= $__toTime - INTERVAL 5 MINUTE AND $__timeFilter(ts_start)`,
				Format: Table, Unit: "short", Options: statOptions(),
			}}},
			{Title: "Ingest", Panels: []Panel{
				ts("ingest-rows", "Ingest rows per second, by table", "spikehunt.ingest.rows: rows written by every ingest instance.",
					"rowsps", "table", deltaRate("spikehunt.ingest.rows", "device", "table")),
				ts("kafka-lag", "Kafka consumer lag, by topic", "spikehunt.ingest.lag: records behind the partitions' end, summed over instances.",
					"short", "topic", gauge("spikehunt.ingest.lag", "device", "topic")),
				ts("dlq", "Dead-letter queue: records per second, by topic and reason", "spikehunt.ingest.dlq: records the ingest could not decode, kept on the DLQ topic.",
					"rowsps", "dlq", deltaRate("spikehunt.ingest.dlq", "if(mode = '', device, concat(device, ' ', mode))", "dlq")),
				ts("detect-pass", "Detector pass time, by stage", "spikehunt.detect.pass_seconds: each pass's wall time.",
					"s", "stage", gauge("spikehunt.detect.pass_seconds", "mode", "stage")),
			}},
			{Title: "Store", Panels: []Panel{
				ts("store-free", "Store volume free (%)", "spikehunt.store.volume.*: the free space of each serve-clickhouse store's volume. "+
					"Below 1 % (64 MiB at least) its care reads every part written until the space is back (docs/store-care.md).",
					"percent", "store", `
SELECT
    $__timeInterval(ts_start) AS time,
    host AS store,
    100 * argMaxIf(value, ts_start, metric = 'spikehunt.store.volume.free_bytes')
        / greatest(1, argMaxIf(value, ts_start, metric = 'spikehunt.store.volume.size_bytes')) AS free_pct
FROM counters
WHERE metric IN ('spikehunt.store.volume.free_bytes', 'spikehunt.store.volume.size_bytes') AND $__timeFilter(ts_start)
GROUP BY time, store
ORDER BY time, store`),
				{
					Key: "store-parts", Title: "Store parts taken out, by table", Type: "table", W: 12, H: 8,
					Description: "Parts the engine could not read (a full volume's doing), taken out of their tables by the store's care: " +
						"rebuilt from the view that feeds the table, or their rows lost (docs/store-care.md). Empty on a healthy store.",
					SQL: `
SELECT device AS tbl,
    sumIf(value, metric = 'spikehunt.store.parts.detached') AS detached,
    sumIf(value, metric = 'spikehunt.store.parts.rebuilt') AS rebuilt,
    sumIf(value, metric = 'spikehunt.store.rows.lost') AS rows_lost
FROM counters
WHERE metric IN ('spikehunt.store.parts.detached', 'spikehunt.store.parts.rebuilt', 'spikehunt.store.rows.lost') AND $__timeFilter(ts_start)
GROUP BY tbl
ORDER BY detached DESC, tbl
LIMIT 100`,
					Format: Table,
					Columns: []Column{
						{Name: "tbl", Title: "Table"},
						{Name: "detached", Title: "Parts taken out"},
						{Name: "rebuilt", Title: "Rebuilt"},
						{Name: "rows_lost", Title: "Rows lost"},
					},
					Options: tableOptions(),
				},
			}},
			{Title: "Agents", Panels: []Panel{
				ts("agent-drops", "Agent drops per second, by reason", "spikehunt.agent.requests.dropped over the fleet's agents.",
					"rowsps", "reason", deltaRate("spikehunt.agent.requests.dropped", "mode", "reason")),
				ts("agent-spool", "Agent spool bytes (fleet total)", "spikehunt.agent.spool.bytes: data waiting on disk for the sink to come back.",
					"bytes", "spool", gauge("spikehunt.agent.spool.bytes", "'spool'", "spool")),
				ts("capture-budget", "Capture budget use (%)", "spikehunt.capture.active over spikehunt.capture.max_concurrent, over all agents.",
					"percent", "budget", `
SELECT
    $__timeInterval(ts_start) AS time,
    'budget' AS budget,
    -- every agent sends both gauges on each pass: the ratio of their sums
    -- over the interval is the fleet's mean use of its budget
    100 * sumIf(value, metric = 'spikehunt.capture.active') / greatest(1, sumIf(value, metric = 'spikehunt.capture.max_concurrent')) AS used_pct
FROM counters
WHERE metric IN ('spikehunt.capture.active', 'spikehunt.capture.max_concurrent') AND $__timeFilter(ts_start)
GROUP BY time
ORDER BY time`),
				{
					Key: "agent-worst", Title: "Agents that dropped or spooled", Type: "table", W: 12, H: 8,
					Description: "Agents with drops or spooled bytes in the range, worst first.",
					SQL: `
SELECT host, sumIf(value, metric = 'spikehunt.agent.requests.dropped') AS dropped,
    maxIf(value, metric = 'spikehunt.agent.spool.bytes') AS max_spool_bytes
FROM counters
WHERE metric IN ('spikehunt.agent.requests.dropped', 'spikehunt.agent.spool.bytes') AND $__timeFilter(ts_start)
GROUP BY host
HAVING dropped > 0 OR max_spool_bytes > 0
ORDER BY dropped DESC, max_spool_bytes DESC
LIMIT 100`,
					Format: Table,
					Columns: []Column{
						{Name: "host", Title: "Agent (host)"},
						{Name: "dropped", Title: "Requests dropped"},
						{Name: "max_spool_bytes", Title: "Max spool", Unit: "bytes"},
					},
					Options: tableOptions(),
				},
			}},
		},
	}
}
