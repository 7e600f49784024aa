package dashboards

// fleetOverview is the thousand spikes (docs/field-stories.md) screen: the averaged graph says
// "regression", the per-host graph says "every host spikes once every
// 15–20 minutes, each at its own moment".
func fleetOverview() Board {
	return Board{
		UID: "spikehunt-fleet", Title: "spikehunt / Fleet overview", File: "fleet-overview",
		Description: "Averaged latency next to every host's per-second max, the spike raster, the fleet patterns and the hardware-class skew.",
		Tags:        []string{"spikehunt"}, From: "now-6h", Refresh: "1m",
		Vars: []Var{serviceVar, hwClassVar, hostsVar, topVar},
		Rows: []Row{
			{Title: "The averaged graph vs. every host", Panels: []Panel{averagedLatency(), perHostMax()}},
			{Title: "The finding", Panels: fleetStats()},
			{Title: "Spike raster", Panels: []Panel{spikeRaster()}},
			{Title: "Patterns and hosts", Panels: []Panel{patternsTable(), hostsTable()}},
			{Title: "Hardware classes", Panels: []Panel{spikeRateByClass(), spikesOverTimeByClass()}},
		},
	}
}

// heatmapH is the height, in grid units, of the host × time heatmaps (and
// of the panel beside them): about 450 pixels of rows, 11 a host at the
// default 40 hosts shown.
const heatmapH = 14

func averagedLatency() Panel {
	return Panel{
		Key: "averaged", Title: "Averaged latency: what the usual graph shows", Type: "timeseries", W: 12, H: heatmapH,
		Description: "The fleet's weighted mean latency, and each host's slowest request per interval averaged over the hosts: " +
			"the averaged graphs most fleets watch. One-second stalls on every host, each at its own moment, come out here as a small, " +
			"uniform rise that looks like a regression. Compare with the per-host view beside it.",
		SQL: `
SELECT
    time,
    sum(wsum) / sum(wcount) / 1000 AS "fleet mean",
    avg(m) / 1000 AS "hosts' max, averaged"
FROM (
    SELECT $__timeInterval(ts) AS time, host,
        sum(weighted_sum_us) AS wsum, sum(weighted_count) AS wcount, max(max_us) AS m
    FROM ` + latencyTable + `
    WHERE ` + whereService + ` AND $__timeFilter(ts) AND ` + whereHWClass + `
    GROUP BY time, host
)
GROUP BY time
ORDER BY time`,
		Format: TimeSeries, Unit: "ms", Min: ptr(0.0),
		Custom:  map[string]any{"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never", "spanNulls": false},
		Options: timeseriesOptions(),
	}
}

func perHostMax() Panel {
	return Panel{
		Key: "per-host", Title: "The ${top} spikiest hosts: the slowest request of each second", Type: "heatmap", W: 12, H: heatmapH,
		Description: "One row per host, the max latency of each interval (a max survives any zoom level, unlike a mean). " +
			"Bright dots scattered over every row, not lined up in columns: each host stalls on its own schedule. " +
			"Drawn for the hosts with the most spike windows in the range (Hosts shown: ${top}); the hosts' table lists every one.",
		SQL: `
SELECT
    $__timeInterval(ts) AS time,
    host,
    max(max_us) / 1000 AS max_ms
FROM ` + latencyTable + `
WHERE ` + whereService + ` AND $__timeFilter(ts) AND ` + whereHWClass + ` AND ` + whereTopHosts + `
GROUP BY time, host
ORDER BY time, host`,
		Format: TimeSeries, Unit: "ms",
		Defaults: map[string]any{"displayName": "${__field.labels.host}"},
		Options:  rowsHeatmapOptions("ms", "exponential"),
	}
}

func fleetStats() []Panel {
	stat := func(key, title, desc, unit, sql string) Panel {
		return Panel{Key: key, Title: title, Description: desc, Type: "stat", W: 6, H: 4, SQL: sql, Format: Table,
			Unit: unit, Options: statOptions(), Decimals: ptr(1)}
	}
	return []Panel{
		stat("hosts-spiking", "Hosts with spikes", "Share of the service's hosts with at least one spike window in the range.", "percent", `
SELECT
    100 * (SELECT uniqExact(host) FROM spikes FINAL
           WHERE `+whereService+` AND is_deleted = 0 AND $__timeFilter(window_start) AND `+whereHWClass+`)
        / greatest(1, (SELECT uniqExact(host) FROM latency_1m
           WHERE `+whereService+` AND $__timeFilter(ts) AND `+whereHWClass+`)) AS hosts_with_spikes`),
		stat("interval", "Typical interval between a host's spikes", "Median over hosts of the mean time between consecutive spike windows on that host.", "s", `
SELECT median(gap) AS interval_s
FROM (
    SELECT host, dateDiff('millisecond', min(window_start), max(window_start)) / 1000 / (count() - 1) AS gap
    FROM spikes FINAL
    WHERE `+whereService+` AND is_deleted = 0 AND $__timeFilter(window_start) AND `+whereHWClass+`
    GROUP BY host
    HAVING count() > 1
)`),
		stat("spike-length", "Typical spike length", "Median length of the spike windows.", "s", `
SELECT median(dateDiff('millisecond', window_start, window_end)) / 1000 AS length_s
FROM spikes FINAL
WHERE `+whereService+` AND is_deleted = 0 AND $__timeFilter(window_start) AND `+whereHWClass),
		stat("illusion", "Averaged-latency illusion", "Share of the fleet-averaged p99 that the spike windows explain, from the latest fleet pattern: "+
			"the part of the 'regression' that is really rare stalls.", "percent", `
SELECT 100 * illusion_share AS illusion_pct
FROM patterns FINAL
WHERE `+whereService+` AND is_deleted = 0 AND $__timeFilter(lookback_end)
ORDER BY lookback_end DESC, hosts_affected DESC
LIMIT 1`),
	}
}

func spikeRaster() Panel {
	return Panel{
		Key: "raster", Title: "Spike raster: spike windows of the ${top} spikiest hosts, host × time", Type: "heatmap", W: 24, H: heatmapH,
		Description: "Each detected spike window is a mark on its host's row. Marks in a column are a synchronized event; " +
			"a regular dotted line on every row is a fleet-recurrent pattern; one busy row is an isolated host. " +
			"Drawn for the hosts with the most spike windows in the range (Hosts shown: ${top}).",
		SQL: `
SELECT
    $__timeInterval(window_start) AS time,
    host,
    count() AS spikes
FROM spikes FINAL
WHERE ` + whereService + ` AND is_deleted = 0 AND $__timeFilter(window_start) AND ` + whereHWClass + ` AND ` + whereTopHosts + `
GROUP BY time, host
ORDER BY time, host`,
		Format: TimeSeries, Unit: "none",
		Defaults: map[string]any{"displayName": "${__field.labels.host}"},
		Options:  rowsHeatmapOptions("none", "linear"),
	}
}

func patternsTable() Panel {
	return Panel{
		Key: "patterns", Title: "Fleet patterns", Type: "table", W: 24, H: 7,
		Description: "The latest verdict of each pattern class: how many hosts, how often, how regular, how synchronized, " +
			"which hardware class spikes more, and the counters that move with the spikes. Click a class for its hosts.",
		SQL: `
SELECT
    class,
    arrayStringConcat(modifiers, ', ') AS modifiers,
    hosts_affected,
    hosts_total,
    100 * hosts_affected / greatest(1, hosts_total) AS hosts_pct,
    recurrence_interval_s,
    regularity,
    synchronicity,
    arrayStringConcat(arrayMap(k -> concat(k, ' ×', toString(round(hw_class_skew[k], 2))), arraySort(mapKeys(hw_class_skew))), ', ') AS hw_class_skew,
    100 * illusion_share AS illusion_pct,
    arrayStringConcat(arrayMap(s -> concat(s.1, if(s.2 = '', '', concat(' ', s.2)), if(s.3 = '', '', concat(' ', s.3)),
        ' (', toString(s.4), ' hosts)'), arraySlice(suspects, 1, 3)), '; ') AS suspects,
    lookback_end,
    service
FROM patterns FINAL
WHERE ` + whereService + ` AND is_deleted = 0 AND $__timeFilter(lookback_end)
ORDER BY lookback_end DESC
LIMIT 1 BY class`,
		Format: Table,
		Columns: []Column{
			{Name: "class", Title: "Class", Links: []DataLink{{Title: "Hosts of this pattern",
				URL: "/d/spikehunt-fleet/spikehunt-fleet-overview?var-service=${__data.fields.service}&${__url_time_range}&viewPanel={{panel:hosts}}"}}},
			{Name: "modifiers", Title: "Modifiers"},
			{Name: "hosts_affected", Title: "Hosts"},
			{Name: "hosts_total", Title: "Of"},
			{Name: "hosts_pct", Title: "Hosts %", Unit: "percent"},
			{Name: "recurrence_interval_s", Title: "Interval", Unit: "s"},
			{Name: "regularity", Title: "Regularity", Unit: "percentunit"},
			{Name: "synchronicity", Title: "Synchronicity", Unit: "percentunit"},
			{Name: "hw_class_skew", Title: "Spike rate by hw class"},
			{Name: "illusion_pct", Title: "Share of averaged p99", Unit: "percent"},
			{Name: "suspects", Title: "Counters moving with the spikes"},
			{Name: "lookback_end", Title: "As of"},
			{Name: "service", Hidden: true},
		},
		Options: tableOptions(),
	}
}

func hostsTable() Panel {
	return Panel{
		Key: "hosts", Title: "Hosts: who spikes, how often, and what moves with it", Type: "table", W: 24, H: 10,
		Description: "One line per host with spike windows in the range. Click a host for its drill-down.",
		SQL: `
SELECT
    s.host AS host,
    s.hw_class AS hw_class,
    s.spikes AS spikes,
    s.interval_s AS interval_s,
    s.worst_ms AS worst_ms,
    s.last_spike AS last_spike,
    t.top_suspect AS top_suspect,
    s.service AS service
FROM (
    SELECT service, host, any(hw_class) AS hw_class, count() AS spikes,
        if(count() > 1, dateDiff('millisecond', min(window_start), max(window_start)) / 1000 / (count() - 1), NULL) AS interval_s,
        max(peak_us) / 1000 AS worst_ms, max(window_start) AS last_spike
    FROM spikes FINAL
    WHERE ` + whereService + ` AND is_deleted = 0 AND $__timeFilter(window_start) AND ` + whereHWClass + ` AND ` + whereHosts + `
    GROUP BY service, host
) AS s
LEFT JOIN (
    SELECT host, topK(1)(concat(metric, if(mode = '', '', concat(' ', mode)), if(device = '', '', concat(' ', device)),
        if(cpu < 0, '', concat(' cpu ', toString(cpu)))))[1] AS top_suspect
    FROM spike_suspects FINAL
    WHERE ` + whereService + ` AND is_deleted = 0 AND rank = 1 AND $__timeFilter(window_start) AND ` + whereHosts + `
    GROUP BY host
) AS t ON t.host = s.host
ORDER BY spikes DESC, host
LIMIT 1000`,
		Format: Table,
		Columns: []Column{
			{Name: "host", Title: "Host", Links: []DataLink{{Title: "Drill into ${__data.fields.host}", URL: linkHost}}},
			{Name: "hw_class", Title: "HW class"},
			{Name: "spikes", Title: "Spikes"},
			{Name: "interval_s", Title: "Mean interval", Unit: "s"},
			{Name: "worst_ms", Title: "Worst", Unit: "ms"},
			{Name: "last_spike", Title: "Last spike"},
			{Name: "top_suspect", Title: "Most frequent top suspect"},
			{Name: "service", Hidden: true},
		},
		Options: tableOptions(),
	}
}

func spikeRateByClass() Panel {
	return Panel{
		Key: "class-rate", Title: "Spike rate by hardware class", Type: "bargauge", W: 12, H: 7,
		Description: "Spike windows per host per hour in each hardware class, counting every host of the class, spiking or not.",
		SQL: `
SELECT
    c.hw_class AS hw_class,
    ifNull(s.spikes, 0) / c.hosts / (dateDiff('second', $__fromTime, $__toTime) / 3600) AS spikes_per_host_hour
FROM (
    SELECT hw_class, uniqExact(host) AS hosts FROM latency_1m
    WHERE ` + whereService + ` AND $__timeFilter(ts) AND ` + whereHWClass + `
    GROUP BY hw_class
) AS c
LEFT JOIN (
    SELECT hw_class, count() AS spikes FROM spikes FINAL
    WHERE ` + whereService + ` AND is_deleted = 0 AND $__timeFilter(window_start) AND ` + whereHWClass + `
    GROUP BY hw_class
) AS s ON s.hw_class = c.hw_class
ORDER BY hw_class
SETTINGS join_use_nulls = 1`,
		Format: Table, Unit: "short", Decimals: ptr(2),
		Options: map[string]any{
			"orientation": "horizontal", "displayMode": "gradient", "showUnfilled": true, "valueMode": "color",
			"namePlacement": "auto", "sizing": "auto", "minVizHeight": 16, "minVizWidth": 8, "maxVizHeight": 300,
			"legend":        map[string]any{"showLegend": false, "displayMode": "list", "placement": "bottom", "calcs": []any{}},
			"reduceOptions": map[string]any{"values": true, "calcs": []any{"lastNotNull"}, "fields": "/^spikes_per_host_hour$/"},
		},
	}
}

func spikesOverTimeByClass() Panel {
	return Panel{
		Key: "class-time", Title: "Spike windows per host by hardware class, over time", Type: "timeseries", W: 12, H: 7,
		Description: "Spike windows started in each interval, divided by the class's host count.",
		SQL: `
SELECT
    s.time AS time,
    s.hw_class AS hw_class,
    s.spikes / c.hosts AS spikes_per_host
FROM (
    SELECT $__timeInterval(window_start) AS time, hw_class, count() AS spikes FROM spikes FINAL
    WHERE ` + whereService + ` AND is_deleted = 0 AND $__timeFilter(window_start) AND ` + whereHWClass + `
    GROUP BY time, hw_class
) AS s
JOIN (
    SELECT hw_class, uniqExact(host) AS hosts FROM latency_1m
    WHERE ` + whereService + ` AND $__timeFilter(ts) AND ` + whereHWClass + `
    GROUP BY hw_class
) AS c ON c.hw_class = s.hw_class
ORDER BY time, hw_class`,
		Format: TimeSeries, Unit: "short",
		Defaults: map[string]any{"displayName": "${__field.labels.hw_class}"},
		Custom:   map[string]any{"drawStyle": "bars", "fillOpacity": 60, "lineWidth": 1, "showPoints": "never", "stacking": map[string]any{"mode": "none", "group": "A"}},
		Options:  timeseriesOptions(),
	}
}

// Panel option sets, as the panel plugins' schemas name them.

func timeseriesOptions() map[string]any {
	return map[string]any{
		"legend":  map[string]any{"showLegend": true, "displayMode": "list", "placement": "bottom", "calcs": []any{"max", "mean"}},
		"tooltip": map[string]any{"mode": "multi", "sort": "desc", "hideZeros": false},
	}
}

// rowsHeatmapOptions draws one row per series (a host, a CPU): the query
// already gives each cell its value, so Grafana does not bucket again.
func rowsHeatmapOptions(unit, scale string) map[string]any {
	return map[string]any{
		"calculate": false,
		"rowsFrame": map[string]any{"layout": "auto"},
		"yAxis":     map[string]any{"axisPlacement": "left", "reverse": true},
		"color": map[string]any{"mode": "scheme", "scheme": "Oranges", "scale": scale, "exponent": 0.5,
			"steps": 64, "fill": "dark-orange", "reverse": false},
		"cellGap":       0,
		"cellValues":    map[string]any{"unit": unit},
		"filterValues":  map[string]any{"le": 1e-9},
		"showValue":     "never",
		"tooltip":       map[string]any{"mode": "single", "yHistogram": false, "showColorScale": false},
		"legend":        map[string]any{"show": true},
		"exemplars":     map[string]any{"color": "rgba(255,0,255,0.7)"},
		"selectionMode": "x",
	}
}

func statOptions() map[string]any {
	return map[string]any{
		"reduceOptions": map[string]any{"values": false, "calcs": []any{"lastNotNull"}, "fields": ""},
		"orientation":   "auto", "textMode": "auto", "colorMode": "value", "graphMode": "none",
		"justifyMode": "auto", "wideLayout": true, "showPercentChange": false, "percentChangeColorMode": "standard",
	}
}

func tableOptions() map[string]any {
	return map[string]any{
		"showHeader": true, "cellHeight": "sm", "frameIndex": 0,
	}
}
