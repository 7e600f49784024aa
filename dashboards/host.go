package dashboards

// hostDrilldown is one host: its latency with the spike windows marked, and
// every kernel counter the agent samples, laid out for the seeds: per-CPU
// interrupt work (000), NIC drops and pause frames (001), disk latency
// (002), a down interface still receiving (003).
func hostDrilldown() Board {
	return Board{
		UID: "spikehunt-host", Title: "spikehunt / Host drill-down", File: "host-drilldown",
		Description: "One host: latency quantiles and max with its spike windows, per-CPU irq and softirq time, interrupts, softirqs, every NIC, disks, run delay, pressure and captures.",
		Tags:        []string{"spikehunt"}, From: "now-1h", Refresh: "1m",
		Vars: []Var{serviceVar, hwClassVar, hostVar, reportBaseVar},
		Annotations: []Annotation{{Name: "Spike windows", Color: "rgba(255, 96, 96, 0.45)", SQL: `
SELECT
    window_start AS time,
    window_end AS timeEnd,
    concat('Spike: peak ', toString(round(peak_us / 1000)), ' ms over a ', toString(round(baseline_us / 1000, 1)),
        ' ms baseline, score ', toString(round(score, 1))) AS text,
    'spike' AS tags
FROM spikes FINAL
WHERE ` + whereService + ` AND ` + whereHost + ` AND is_deleted = 0 AND $__timeFilter(window_start)
ORDER BY time`}},
		Rows: []Row{
			{Title: "Latency", Panels: []Panel{hostLatency()}},
			{Title: "CPUs: interrupt work", Panels: []Panel{cpuModeHeatmap("softirq-cpu", "softirq"), cpuModeHeatmap("irq-cpu", "irq"),
				softirqsByVector(), interruptsByCPU()}},
			{Title: "Network", Panels: []Panel{nicTable(), nicPackets(), nicDropsAndPause()}},
			{Title: "Disks", Panels: []Panel{diskLatency(), diskBusy()}},
			{Title: "Scheduler and pressure", Panels: []Panel{runDelay(), pressure()}},
			{Title: "Captures", Panels: []Panel{hostCaptures()}},
		},
	}
}

// A counter's rate per second in each interval: the sum of its deltas over
// the measured time they cover, per series, so that a late tick or a bucket
// edge does not bend it. inner selects (time, <series>, cpu, v, s): one
// row per interval and source (a CPU, an instance), whose rates add up.
func rate(inner, series string) string {
	return `
SELECT time, ` + series + `, sum(v / s) AS per_s
FROM (` + inner + `)
GROUP BY time, ` + series + `
ORDER BY time, ` + series
}

func hostLatency() Panel {
	return Panel{
		Key: "latency", Title: "Latency: quantiles and max, with spike windows", Type: "timeseries", W: 24, H: 9,
		Description: "Weighted quantiles of the host's requests and the exact max of each interval (slow requests are always kept). " +
			"Spike windows are the red regions.",
		SQL: `
SELECT time, q[1] / 1000 AS p50, q[2] / 1000 AS p90, q[3] / 1000 AS p99, q[4] / 1000 AS "p99.9", m / 1000 AS max
FROM (
    SELECT $__timeInterval(ts) AS time,
        quantilesTDigestWeightedMerge(0.5, 0.9, 0.99, 0.999)(quantiles_us) AS q,
        max(max_us) AS m
    FROM latency_1s
    WHERE ` + whereService + ` AND ` + whereHost + ` AND $__timeFilter(ts)
    GROUP BY time
)
ORDER BY time`,
		Format: TimeSeries, Unit: "ms", Min: ptr(0.0),
		Custom: map[string]any{"drawStyle": "line", "lineWidth": 1, "fillOpacity": 0, "showPoints": "never",
			"scaleDistribution": map[string]any{"type": "log", "log": 10}},
		Options: timeseriesOptions(),
	}
}

// cpuModeHeatmap is the DPC flood (docs/field-stories.md) view: the share of each CPU's time spent in
// one mode (softirq or irq). Four bright rows among idle ones are RSS
// queues pinned to four CPUs.
func cpuModeHeatmap(key, mode string) Panel {
	title := map[string]string{"softirq": "Softirq time per CPU (%)", "irq": "Hardirq time per CPU (%)"}[mode]
	return Panel{
		Key: key, Title: title, Type: "heatmap", W: 12, H: 9,
		Description: "Share of each CPU's time in " + mode + " mode (system.cpu.time, cpu.mode=" + mode + "), per interval.",
		SQL: `
SELECT
    $__timeInterval(ts_start) AS time,
    concat('cpu ', leftPad(toString(cpu), 3, '0')) AS cpu,
    100 * sum(value) / (sum(interval_ms) / 1000) AS pct
FROM counters
WHERE ` + whereHost + ` AND metric = 'system.cpu.time' AND mode = '` + mode + `' AND interval_ms > 0 AND $__timeFilter(ts_start)
GROUP BY time, cpu
ORDER BY time, cpu`,
		Format: TimeSeries, Unit: "percent", Min: ptr(0.0), Max: ptr(100.0),
		Defaults: map[string]any{"displayName": "${__field.labels.cpu}"},
		Options:  rowsHeatmapOptions("percent", "linear"),
	}
}

func softirqsByVector() Panel {
	return lines(Panel{
		Key: "softirqs", Title: "Softirqs raised per second, by vector", Type: "timeseries", W: 12, H: 8,
		Description: "spikehunt.softirqs summed over CPUs: NET_RX climbing with latency points at receive processing.",
		SQL: rate(`
    SELECT $__timeInterval(ts_start) AS time, mode AS vector, cpu, sum(value) AS v, sum(interval_ms) / 1000 AS s
    FROM counters
    WHERE `+whereHost+` AND metric = 'spikehunt.softirqs' AND interval_ms > 0 AND $__timeFilter(ts_start)
    GROUP BY time, vector, cpu`, "vector"),
		Unit: "ops",
	}, "vector", 0)
}

func interruptsByCPU() Panel {
	return lines(Panel{
		Key: "interrupts", Title: "Interrupts per second, by IRQ (device/queue) and CPU: the 16 busiest", Type: "timeseries", W: 12, H: 8,
		Description: "spikehunt.interrupts per IRQ line and CPU. A NIC's queues all landing on the same few CPUs pins those CPUs with interrupt work while the others idle.",
		SQL: rate(`
    SELECT $__timeInterval(ts_start) AS time,
        concat(if(attrs['spikehunt.irq.device'] = '', device, concat(device, ' ', attrs['spikehunt.irq.device'])), ' · cpu ', toString(cpu)) AS irq,
        cpu, sum(value) AS v, sum(interval_ms) / 1000 AS s
    FROM counters
    WHERE `+whereHost+` AND metric = 'spikehunt.interrupts' AND interval_ms > 0 AND $__timeFilter(ts_start)
        AND (device, cpu) IN (
            SELECT device, cpu FROM counters
            WHERE `+whereHost+` AND metric = 'spikehunt.interrupts' AND $__timeFilter(ts_start)
            GROUP BY device, cpu ORDER BY sum(value) DESC LIMIT 16)
    GROUP BY time, irq, cpu`, "irq"),
		Unit: "ops",
	}, "irq", 0)
}

// nicTable lists every interface, up or down, with what it received,
// dropped and paused over the range: the down interface (docs/field-stories.md) burning a
// CPU on traffic it drops stands out in red.
func nicTable() Panel {
	return Panel{
		Key: "nics", Title: "Every NIC over the range", Type: "table", W: 24, H: 6,
		Description: "All interfaces the agent saw, with their last operstate. A down interface that still receives packets is flagged.",
		SQL: `
SELECT
    nic,
    operstate,
    rx_pps,
    tx_pps,
    rx_dropped_ps,
    errors_ps,
    pause_ps,
    multiIf(operstate != 'up' AND rx_pps > 0, 'down, yet receiving', rx_dropped_ps > 0.01 * rx_pps AND rx_dropped_ps > 1, 'dropping', '') AS flag
FROM (
    SELECT
        device AS nic,
        argMaxIf(attrs['spikehunt.network.operstate'], ts_start, attrs['spikehunt.network.operstate'] != '') AS operstate,
        -- the seconds the interface's receive counter covers: every rate's denominator
        greatest(0.001, sumIf(interval_ms, metric = 'system.network.packet.count' AND mode = 'receive') / 1000) AS span,
        sumIf(value, metric = 'system.network.packet.count' AND mode = 'receive') / span AS rx_pps,
        sumIf(value, metric = 'system.network.packet.count' AND mode = 'transmit') / span AS tx_pps,
        sumIf(value, metric = 'system.network.packet.dropped' AND mode = 'receive') / span AS rx_dropped_ps,
        sumIf(value, metric = 'system.network.errors') / span AS errors_ps,
        sumIf(value, metric = 'spikehunt.network.pause_frames') / span AS pause_ps
    FROM counters
    WHERE ` + whereHost + ` AND metric IN ('system.network.packet.count', 'system.network.packet.dropped',
            'system.network.errors', 'spikehunt.network.pause_frames')
        AND $__timeFilter(ts_start)
    GROUP BY nic
)
ORDER BY flag = '', nic`,
		Format: Table,
		Columns: []Column{
			{Name: "nic", Title: "Interface"},
			{Name: "operstate", Title: "State", Cell: map[string]any{"type": "color-background", "mode": "basic"}},
			{Name: "rx_pps", Title: "Received", Unit: "pps"},
			{Name: "tx_pps", Title: "Sent", Unit: "pps"},
			{Name: "rx_dropped_ps", Title: "Dropped (rx)", Unit: "pps"},
			{Name: "errors_ps", Title: "Errors", Unit: "pps"},
			{Name: "pause_ps", Title: "Pause frames", Unit: "pps"},
			{Name: "flag", Title: "Flag", Cell: map[string]any{"type": "color-text"}},
		},
		Defaults: map[string]any{"mappings": []any{
			map[string]any{"type": "value", "options": map[string]any{
				"up":                  map[string]any{"color": "green", "index": 0},
				"down":                map[string]any{"color": "red", "index": 1},
				"down, yet receiving": map[string]any{"color": "red", "index": 2},
				"dropping":            map[string]any{"color": "orange", "index": 3},
			}},
		}},
		Options: tableOptions(),
	}
}

func nicPackets() Panel {
	return lines(Panel{
		Key: "nic-packets", Title: "Packets received per second, per NIC (state in brackets)", Type: "timeseries", W: 12, H: 8,
		SQL: rate(`
    SELECT $__timeInterval(ts_start) AS time,
        concat(device, ' (', attrs['spikehunt.network.operstate'], ')') AS nic,
        cpu, sum(value) AS v, sum(interval_ms) / 1000 AS s
    FROM counters
    WHERE `+whereHost+` AND metric = 'system.network.packet.count' AND mode = 'receive' AND interval_ms > 0 AND $__timeFilter(ts_start)
    GROUP BY time, nic, cpu`, "nic"),
		Unit: "pps",
	}, "nic", 0)
}

func nicDropsAndPause() Panel {
	return lines(Panel{
		Key: "nic-drops", Title: "Drops, driver drops and pause frames per second, per NIC", Type: "timeseries", W: 12, H: 8,
		Description: "system.network.packet.dropped, spikehunt.network.driver_drops (ethtool) and spikehunt.network.pause_frames: " +
			"a switch pausing the NIC shows as pause frames rising with latency.",
		SQL: rate(`
    SELECT $__timeInterval(ts_start) AS time,
        concat(device, ' ', multiIf(metric = 'spikehunt.network.pause_frames', concat('pause ', mode),
            metric = 'spikehunt.network.driver_drops', concat('driver ', mode), concat('dropped ', mode))) AS series,
        cpu, sum(value) AS v, sum(interval_ms) / 1000 AS s
    FROM counters
    WHERE `+whereHost+` AND metric IN ('system.network.packet.dropped', 'spikehunt.network.driver_drops', 'spikehunt.network.pause_frames')
        AND interval_ms > 0 AND $__timeFilter(ts_start)
    GROUP BY time, series, cpu`, "series"),
		Unit: "pps",
	}, "series", 0)
}

func diskLatency() Panel {
	return lines(Panel{
		Key: "disk-latency", Title: "Disk latency per operation, by device and direction", Type: "timeseries", W: 12, H: 8,
		Description: "system.disk.operation_time / system.disk.operations: the mean time an IO took. " +
			"A stall that is not here lives above the disk (a filter driver, say).",
		SQL: `
SELECT
    $__timeInterval(ts_start) AS time,
    concat(device, ' ', mode) AS disk,
    1000 * sumIf(value, metric = 'system.disk.operation_time') / greatest(1, sumIf(value, metric = 'system.disk.operations')) AS ms_per_op
FROM counters
WHERE ` + whereHost + ` AND metric IN ('system.disk.operation_time', 'system.disk.operations') AND $__timeFilter(ts_start)
GROUP BY time, disk
ORDER BY time, disk`,
		Unit: "ms",
	}, "disk", 0)
}

func diskBusy() Panel {
	return lines(Panel{
		Key: "disk-busy", Title: "Disk busy (%)", Type: "timeseries", W: 12, H: 8,
		Description: "system.disk.io_time over the measured interval: the share of time the device had IO in flight.",
		SQL: `
SELECT $__timeInterval(ts_start) AS time, device AS disk, 100 * sum(value) / (sum(interval_ms) / 1000) AS busy_pct
FROM counters
WHERE ` + whereHost + ` AND metric = 'system.disk.io_time' AND interval_ms > 0 AND $__timeFilter(ts_start)
GROUP BY time, disk
ORDER BY time, disk`,
		Unit: "percent", Min: ptr(0.0),
	}, "disk", 10)
}

func runDelay() Panel {
	return lines(Panel{
		Key: "run-delay", Title: "Run delay per CPU (ms waited per second)", Type: "timeseries", W: 12, H: 8,
		Description: "spikehunt.cpu.run_delay: time runnable tasks waited for a CPU (schedstat).",
		SQL: `
SELECT $__timeInterval(ts_start) AS time, concat('cpu ', leftPad(toString(cpu), 3, '0')) AS cpu,
    1000 * sum(value) / (sum(interval_ms) / 1000) AS ms_per_s
FROM counters
WHERE ` + whereHost + ` AND metric = 'spikehunt.cpu.run_delay' AND interval_ms > 0 AND $__timeFilter(ts_start)
GROUP BY time, cpu
ORDER BY time, cpu`,
		Unit: "ms",
	}, "cpu", 0)
}

func pressure() Panel {
	return lines(Panel{
		Key: "psi", Title: "Pressure stall (%), by resource", Type: "timeseries", W: 12, H: 8,
		Description: "spikehunt.pressure.stall_time (PSI): the share of time some (or all) tasks stalled on CPU, memory or IO.",
		SQL: `
SELECT $__timeInterval(ts_start) AS time, concat(device, ' ', mode) AS resource,
    100 * sum(value) / (sum(interval_ms) / 1000) AS stall_pct
FROM counters
WHERE ` + whereHost + ` AND metric = 'spikehunt.pressure.stall_time' AND interval_ms > 0 AND $__timeFilter(ts_start)
GROUP BY time, resource
ORDER BY time, resource`,
		Unit: "percent", Min: ptr(0.0),
	}, "resource", 0)
}

func hostCaptures() Panel {
	return Panel{
		Key: "host-captures", Title: "Captures of this host", Type: "table", W: 24, H: 7,
		Description: "Deep captures (perf, ftrace, bpftrace, WPR) whose window overlaps the range. Open the report, or the captures index.",
		SQL: `
SELECT window_start, window_end, backend, profile, trigger, status, length(spike_ids) AS spikes, bytes, lost_events, capture_id, uri,
    capture_namespace, capture_name
FROM captures FINAL
WHERE ` + whereHost + ` AND window_end >= $__fromTime AND window_start <= $__toTime
ORDER BY window_start DESC
LIMIT 200`,
		Format: Table,
		Columns: []Column{
			{Name: "window_start", Title: "From"},
			{Name: "window_end", Title: "To"},
			{Name: "backend", Title: "Backend"},
			{Name: "profile", Title: "Profile"},
			{Name: "trigger", Title: "Trigger"},
			{Name: "status", Title: "Status"},
			{Name: "spikes", Title: "Spikes"},
			{Name: "bytes", Title: "Size", Unit: "bytes"},
			{Name: "lost_events", Title: "Lost events"},
			{Name: "capture_id", Title: "Capture", Links: []DataLink{{Title: "In the captures index", URL: linkHostCaptures}}},
			{Name: "uri", Title: "Artifact", Links: []DataLink{{Title: "Open the report", URL: linkReport, NewTab: true}}},
			{Name: "capture_namespace", Hidden: true},
			{Name: "capture_name", Hidden: true},
		},
		Options: tableOptions(),
	}
}
