package dashboards

// capturesIndex lists the deep captures by the spike windows they cover,
// with their status, size and lost events, and links to the capture's
// report (the artifact's URI stays in view) and to the spike in the host
// drill-down.
func capturesIndex() Board {
	whereBackend := "$__conditionalAll(backend IN (${backend:singlequote}), $backend)"
	whereStatus := "$__conditionalAll(status IN (${status:singlequote}), $status)"
	inRange := "window_end > $__fromTime_ms AND window_start < $__toTime_ms"
	capHosts := "$__conditionalAll(host IN (${host:singlequote}), $host)"
	filter := inRange + " AND " + capHosts + " AND " + whereBackend + " AND " + whereStatus
	stat := func(key, title, unit, sql string) Panel {
		return Panel{Key: key, Title: title, Type: "stat", W: 6, H: 4, SQL: sql, Format: Table, Unit: unit, Options: statOptions()}
	}
	return Board{
		UID: "spikehunt-captures", Title: "spikehunt / Captures", File: "captures",
		Description: "The deep captures (perf, ftrace, bpftrace, WPR) indexed by the spike windows they cover.",
		Tags:        []string{"spikehunt"}, From: "now-24h", Refresh: "1m",
		Vars: []Var{serviceVar, hwClassVar, hostsVar, reportBaseVar,
			{Name: "backend", Label: "Backend", Type: "query", Multi: true, IncludeAll: true,
				SQL: `SELECT DISTINCT backend FROM captures WHERE window_end > $__fromTime_ms AND window_start < $__toTime_ms ORDER BY backend`},
			{Name: "status", Label: "Status", Type: "query", Multi: true, IncludeAll: true,
				SQL: `SELECT DISTINCT status FROM captures WHERE window_end > $__fromTime_ms AND window_start < $__toTime_ms ORDER BY status`},
		},
		Rows: []Row{
			{Title: "Summary", Panels: []Panel{
				stat("captures", "Captures", "short", `SELECT count() AS captures FROM captures FINAL WHERE `+filter),
				stat("bytes", "Artifact bytes", "bytes", `SELECT sum(bytes) AS bytes FROM captures FINAL WHERE `+filter),
				stat("lost", "Lost events", "short", `SELECT sum(lost_events) AS lost_events FROM captures FINAL WHERE `+filter),
				stat("covered", "Spike windows covered", "short",
					`SELECT uniqExact(arrayJoin(spike_ids)) AS spikes_covered FROM captures FINAL WHERE `+filter),
			}},
			{Title: "Index", Panels: []Panel{{
				Key: "index", Title: "Captures by spike window", Type: "table", W: 24, H: 14,
				Description: "One line per spike window a capture covers (a capture taken for no detected spike has one line of its own). " +
					"Click the spike for the host around it, the artifact to open the node's report of it (the operator's report server, ${report_base}). The verdict is the agent's analysis of the slowest request in the window, " +
					"made on its node from the trace (spikehunt captures explain has the rest).",
				SQL: `
SELECT
    c.window_start AS window_start,
    c.window_end AS window_end,
    c.host AS host,
    c.backend AS backend,
    c.profile AS profile,
    c.trigger AS trigger,
    c.status AS status,
    c.bytes AS bytes,
    c.lost_events AS lost_events,
    c.spike_id AS spike_id,
    s.window_start AS spike_start,
    s.peak_us / 1000 AS spike_peak_ms,
    if(s.service = '', '${service}', s.service) AS service,
    c.capture_id AS capture_id,
    c.uri AS uri,
    c.capture_namespace AS capture_namespace,
    c.capture_name AS capture_name,
    c.verdict AS verdict,
    toUnixTimestamp64Milli(ifNull(s.window_start, c.window_start)) - 300000 AS link_from,
    toUnixTimestamp64Milli(ifNull(s.window_end, c.window_end)) + 300000 AS link_to
FROM (
    SELECT *, arrayJoin(if(empty(spike_ids), [''], spike_ids)) AS spike_id
    FROM captures FINAL
    WHERE ` + filter + `
) AS c
LEFT JOIN (
    SELECT spike_id, service, window_start, window_end, peak_us
    FROM spikes FINAL
    WHERE is_deleted = 0 AND window_start >= $__fromTime - INTERVAL 1 HOUR AND window_start <= $__toTime + INTERVAL 1 HOUR
) AS s ON s.spike_id = c.spike_id
ORDER BY window_start DESC, spike_start
LIMIT 1000
SETTINGS join_use_nulls = 1`,
				Format: Table,
				Columns: []Column{
					{Name: "window_start", Title: "Capture from"},
					{Name: "window_end", Title: "To"},
					{Name: "host", Title: "Host", Links: []DataLink{{Title: "Drill into ${__data.fields.host}", URL: linkHost}}},
					{Name: "backend", Title: "Backend"},
					{Name: "profile", Title: "Profile"},
					{Name: "trigger", Title: "Trigger"},
					{Name: "status", Title: "Status"},
					{Name: "bytes", Title: "Size", Unit: "bytes"},
					{Name: "lost_events", Title: "Lost events"},
					{Name: "spike_id", Title: "Spike", Links: []DataLink{{Title: "The spike in the host drill-down", URL: linkSpike}}},
					{Name: "spike_start", Title: "Spike at"},
					{Name: "spike_peak_ms", Title: "Spike peak", Unit: "ms"},
					{Name: "service", Hidden: true},
					{Name: "capture_id", Title: "Capture"},
					{Name: "uri", Title: "Artifact", Links: []DataLink{{Title: "Open the report", URL: linkReport, NewTab: true}}},
					{Name: "capture_namespace", Hidden: true},
					{Name: "capture_name", Hidden: true},
					{Name: "verdict", Title: "Verdict (the node's analysis)"},
					{Name: "link_from", Hidden: true},
					{Name: "link_to", Hidden: true},
				},
				Options: tableOptions(),
			}}},
			{Title: "Over time", Panels: []Panel{
				{
					Key: "bytes-time", Title: "Artifact bytes by backend", Type: "timeseries", W: 12, H: 8,
					SQL: `
SELECT $__timeInterval(window_start) AS time, backend, sum(bytes) AS bytes
FROM captures FINAL
WHERE ` + filter + `
GROUP BY time, backend
ORDER BY time, backend`,
					Format: TimeSeries, Unit: "bytes",
					Defaults: map[string]any{"displayName": "${__field.labels.backend}"},
					Custom:   map[string]any{"drawStyle": "bars", "fillOpacity": 60, "lineWidth": 1, "showPoints": "never"},
					Options:  timeseriesOptions(),
				},
				{
					Key: "status", Title: "Captures by status", Type: "bargauge", W: 12, H: 8,
					SQL: `
SELECT status, count() AS captures
FROM captures FINAL
WHERE ` + filter + `
GROUP BY status
ORDER BY status`,
					Format: Table, Unit: "short",
					Options: map[string]any{
						"orientation": "horizontal", "displayMode": "basic", "showUnfilled": true, "valueMode": "color",
						"namePlacement": "auto", "sizing": "auto", "minVizHeight": 16, "minVizWidth": 8, "maxVizHeight": 300,
						"legend":        map[string]any{"showLegend": false, "displayMode": "list", "placement": "bottom", "calcs": []any{}},
						"reduceOptions": map[string]any{"values": true, "calcs": []any{"lastNotNull"}, "fields": "/^captures$/"},
					},
				},
			}},
		},
	}
}
