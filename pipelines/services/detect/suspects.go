package detect

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/spikehunt/spikehunt/internal/store"
)

// Suspects: for each spike window, every counter series of its host —
// (metric, cpu, device, mode) — is compared with its own recent past.
//
//   - during: the highest per-interval rate (delta / measured interval)
//     among the counter intervals overlapping [start − Margin,
//     end + Margin]. Intervals are 1–30 s, so a 1 s storm inside a 10 s
//     interval shows at a tenth of its height: still far outside a quiet
//     series' noise. The highest, not the mean over all overlapping
//     intervals: a storm lands in one interval, and the neighbour the
//     margin drags in would halve it again.
//   - baseline: the per-interval rates of the intervals inside
//     [start − Baseline, start − Guard], minus those touching another spike
//     window of the host; their median and MAD.
//   - deviation = (during − median) / max(1.4826 × MAD, RelativeFloor ×
//     |median|, the metric's absolute floor). Only a rise counts: idle CPU
//     time falling is the mirror of softirq time rising, so
//     system.cpu.time/idle is left out; a gauge (slab) is judged by its
//     growth between readings.
//   - the rank weighs the deviation by what the series is. Time taken from
//     the workload — CPU time by mode, run delay, PSI stall time, a disk's
//     latency per IO (suspects_disk.go), a cgroup's CPU, throttled and
//     stall time — explains a latency spike directly and
//     weighs TimeWeight (100); counts (packets, drops, interrupts, softirqs
//     raised, switches) are the load or its echo and weigh 1. So a NIC
//     storm ranks the softirq time on the CPUs it pinned (the DPC flood (docs/field-stories.md)) above
//     the packets and drops that came with it, whose counts, normally
//     near zero, deviate by thousands. Packets received on an interface
//     whose operstate is down (the down interface (docs/field-stories.md)) weigh DownInterfaceWeight
//     (10 000): traffic that should not exist ranks above the softirq time
//     it causes.
//
// Workload cgroups have two rules of their own (suspects_leaves.go): one
// the agent reported in too little of the baseline is judged against what
// it did report, or against zero if nothing, and a
// parent whose rise a descendant accounts for gives way to it.
//
// A series is a suspect at deviation ≥ MinDeviation; a spike where no
// counter moved (a library sleeping in the process) has none, which is an
// answer too. One query handles all the windows of a chunk: the windows,
// expanded into the 5-minute slots their baseline and during ranges
// touch, are joined to the counters of their hosts by (host, slot), so a
// counter row meets only the windows near it.

// suspectSlot is the join grain between windows and counter rows.
const suspectSlot = 5 * time.Minute

// maxCounterInterval is the longest counter interval the join is sure to
// see whole: rows are fetched from this much before the baseline starts.
const maxCounterInterval = time.Minute

// Absolute floors of the deviation's scale, in the rate's unit per second:
// a series that is flat zero must move by this much to count. The metrics
// in seconds are the time-valued ones TimeWeight applies to.
//
// direct marks counts that are a cause's own evidence rather than the load
// or its echo: pages scanned by allocating tasks in direct reclaim, their
// stalls, compaction stalls, a listen queue's overflows and drops. They are
// zero on a healthy host, and they weigh TimeWeight like time: the memory
// pressure stall time that direct reclaim causes must not outrank the
// reclaim itself.
var absoluteFloors = []struct {
	metric  string
	floor   float64
	seconds bool
	direct  bool
}{
	// Seconds per second. CPU time comes in 10 ms ticks: on 1 s intervals
	// one tick is 0.01 s/s, which must stay below the bar.
	{"system.cpu.time", 0.005, true, false},
	{"spikehunt.cpu.run_delay", 0.002, true, false},
	{"spikehunt.pressure.stall_time", 0.002, true, false},
	// A disk weighs by its IOs' latency (diskLatencyMetric), in seconds
	// per IO: IOs that take 100 ms more than they did deviate as a
	// quarter of a CPU does. Its summed operation time is not judged, and
	// its busy time (at most 1 s/s) is the load, as its bytes are: a quiet
	// disk that starts writing back is busy, not slow (suspects_disk.go).
	{diskLatencyMetric, 0.002, true, false},
	{"system.disk.io_time", 0.002, false, false},
	// A cgroup's CPU and the time it was throttled or stalled on CPU
	// weigh as the host's CPU time and PSI do: a pod throttled for 0.5 s
	// of every second ranks like softirq time taking half a CPU.
	{"spikehunt.cgroup.cpu.usage", 0.005, true, false},
	{"spikehunt.cgroup.cpu.throttled_time", 0.002, true, false},
	{"spikehunt.cgroup.pressure.stall_time", 0.002, true, false},
	{"system.network.io", 64 << 10, false, false},    // bytes per second
	{"system.disk.io", 64 << 10, false, false},       // bytes per second: writeback from nothing is not a stall's cause by itself
	{"spikehunt.memory.slab", 1 << 20, false, false}, // bytes of growth per second
	// Dirty and writeback pages swing by megabytes as a matter of course.
	{"spikehunt.memory.dirty", 16 << 20, false, false},
	{"spikehunt.memory.writeback", 16 << 20, false, false},
	// Counts, per second.
	{"spikehunt.memory.reclaim.scanned", 8, false, true}, // pages: a 32 KiB/s trickle is not reclaim
	{"spikehunt.memory.reclaim.stalls", 1, false, true},
	{"spikehunt.memory.compaction.stalls", 1, false, true},
	{"spikehunt.tcp.listen_overflows", 1, false, true},
	{"spikehunt.tcp.listen_drops", 1, false, true},
	// A workload's hits of its memory limit (v2 memory.events, v1
	// memory.failcnt): its tasks reclaim in the cgroup, which /proc/vmstat's
	// direct reclaim counters leave out.
	{"spikehunt.cgroup.memory.events", 1, false, true},
}

// configuration are gauges that describe a setting, not load: a cgroup's
// CPU limit. They stay in the counters table for the sentences ("limit
// 0.5 CPU") and are never suspects themselves.
var configuration = []string{"spikehunt.cgroup.cpu.limit"}

// defaultAbsoluteFloor is for counts (packets, interrupts, softirqs,
// switches, drops): one per second.
const defaultAbsoluteFloor = 1.0

// notDownOperstates are the operstate values that do not count as down:
// "up"; "unknown", which the kernel reports for lo and most virtual
// devices, which do carry traffic; and "", a row that did not say.
const notDownOperstates = `'', 'up', 'unknown'`

// selfTelemetry are the prefixes of spikehunt's own telemetry (the
// agent's drops and spool, the capture budget, ingest and the detector):
// it lives in the counters table beside the kernel's but is never a
// suspect. It moves with a spike because of it (an agent spools and drops
// while its host stalls), and naming it would point the SRE at the
// instrument rather than the cause.
var selfTelemetry = []string{"spikehunt.agent.", "spikehunt.capture.", "spikehunt.ingest.", "spikehunt.detect."}

// notSelfTelemetry is the condition that keeps selfTelemetry and
// configuration out.
func notSelfTelemetry() string {
	var parts []string
	for _, p := range selfTelemetry {
		parts = append(parts, "startsWith(metric, "+store.QuoteString(p)+")")
	}
	for _, m := range configuration {
		parts = append(parts, "metric = "+store.QuoteString(m))
	}
	return "NOT (" + strings.Join(parts, " OR ") + ")"
}

// timeMetrics are the metrics that weigh TimeWeight: those measured in
// seconds (of CPU, waiting, disk) and the direct evidence of a cause.
func timeMetrics() []string {
	var out []string
	for _, f := range absoluteFloors {
		if f.seconds || f.direct {
			out = append(out, f.metric)
		}
	}
	return out
}

// shareMetrics are the metrics in seconds per second, a share of a CPU
// or of the time: those MinShareRise applies to. A disk's latency per IO
// is in seconds, not a share, and keeps its floor alone.
func shareMetrics() []string {
	var out []string
	for _, f := range absoluteFloors {
		if f.seconds && f.metric != diskLatencyMetric {
			out = append(out, f.metric)
		}
	}
	return out
}

func floorExpr() string {
	var b strings.Builder
	b.WriteString("multiIf(")
	for _, f := range absoluteFloors {
		fmt.Fprintf(&b, "metric = %s, %s, ", store.QuoteString(f.metric), floatLit(f.floor))
	}
	b.WriteString(floatLit(defaultAbsoluteFloor) + ")")
	return b.String()
}

// suspectChunk is a set of windows whose suspects one query ranks: the
// spike rows that the condition `where` selects. The windows are read back
// from the table the pass has just written, not sent as literals (a full
// day of a large fleet has tens of thousands), and without FINAL: the
// rows the pass wrote are exactly those carrying its detected_at.
type suspectChunk struct {
	where    string    // a condition on spikes rows, read without FINAL
	windows  int       // how many it selects
	hosts    []string  // their hosts
	from, to time.Time // counters are read over [from, to)
}

// suspectsSQL ranks the suspects of one chunk of windows of service.
func suspectsSQL(service string, ch suspectChunk, c SuspectConfig) string {
	return render(suspectsTmpl, suspectsParams{
		Service:              service,
		WindowsSQL:           "SELECT spike_id, host, toUnixTimestamp64Milli(window_start) AS ws, toUnixTimestamp64Milli(window_end) AS we FROM spikes WHERE " + ch.where,
		Hosts:                ch.hosts,
		From:                 ch.from,
		To:                   ch.to,
		SlotMS:               suspectSlot.Milliseconds(),
		MaxCounterIntervalMS: maxCounterInterval.Milliseconds(),
		MarginMS:             c.Margin.Milliseconds(),
		BaselineMS:           c.Baseline.Milliseconds(),
		GuardMS:              c.Guard.Milliseconds(),
		MinBaselineIntervals: c.MinBaselineIntervals,
		MinDeviation:         c.MinDeviation,
		RelativeFloor:        c.RelativeFloor,
		TimeWeight:           c.TimeWeight,
		DownInterfaceWeight:  c.DownInterfaceWeight,
		Fetch:                fetchPerWindow(c.Max),
		FreshPrefix:          cgroupPrefix,
		DiskLatencyMetric:    diskLatencyMetric,
		DiskLatencyMinOps:    diskLatencyMinOps,
		TimeMetrics:          timeMetrics(),
		ShareMetrics:         shareMetrics(),
		MinShareRise:         c.MinShareRise,
		MinCountRatio:        c.MinCountRatio,
		FloorSQL:             floorExpr(),
		NotDownSQL:           notDownOperstates,
		NotSelfTelemetrySQL:  notSelfTelemetry(),
	})
}

// suspectsParams are the values suspectsTmpl names; the …MS ones are
// milliseconds, as the query's times are.
type suspectsParams struct {
	Service string
	// WindowsSQL selects the chunk's windows (spike_id, host, ws, we).
	WindowsSQL string
	// Hosts are the windows' hosts, whose counters [From, To) are read.
	Hosts    []string
	From, To time.Time
	// SlotMS is the join grain (suspectSlot); MaxCounterIntervalMS how far
	// before the baseline a window's slots begin.
	SlotMS, MaxCounterIntervalMS  int64
	MarginMS, BaselineMS, GuardMS int64
	MinBaselineIntervals          int
	MinDeviation, RelativeFloor   float64
	TimeWeight                    float64
	DownInterfaceWeight           float64
	// Fetch is how many rows a window's query keeps: more than
	// SuspectConfig.Max, for preferLeaves to drop from.
	Fetch int
	// FreshPrefix is the metrics' prefix of the workload cgroups
	// (cgroupPrefix), whose series may be judged fresh.
	FreshPrefix string
	// DiskLatencyMetric names the per-IO latency derived from a disk's
	// operation time and operations, spread over at least
	// DiskLatencyMinOps operations (suspects_disk.go).
	DiskLatencyMetric string
	DiskLatencyMinOps int
	// TimeMetrics weigh TimeWeight.
	TimeMetrics []string
	// ShareMetrics must rise by MinShareRise, diluted by their interval.
	ShareMetrics []string
	MinShareRise float64
	// MinCountRatio is how far a count must rise over its baseline.
	MinCountRatio float64
	// FloorSQL is a counter row's absolute floor (floorExpr), NotDownSQL
	// the operstates that are not down (notDownOperstates),
	// NotSelfTelemetrySQL the condition that keeps spikehunt's own
	// telemetry out.
	FloorSQL, NotDownSQL, NotSelfTelemetrySQL string
}

var suspectsTmpl = sqlTemplate("suspects", `
SELECT spike_id, host, ws, metric, cpu, device, mode, base, during, deviation
FROM (
    SELECT spike_id, host, ws, metric, cpu, device, mode, base, during,
        (during - base) / greatest(mad * 1.4826, {{float .RelativeFloor}} * abs(base), floor_abs) AS raw,
        -- A share of a CPU or of the time must rise by MinShareRise to
        -- explain a stall, less as far as its interval dilutes the window.
        metric NOT IN {{strs .ShareMetrics}}
            OR during - base >= {{float .MinShareRise}} * least(1, window_len / greatest(during_len, 1)) AS share_rose,
        -- A count (the load or its echo) must reach MinCountRatio times its
        -- baseline, less as far as its interval dilutes the window.
        metric IN {{strs .TimeMetrics}} OR down OR base <= 0
            OR during >= base * (1 + ({{float .MinCountRatio}} - 1) * least(1, window_len / greatest(during_len, 1))) AS count_rose,
        share_rose AND count_rose AS rose_enough,
        raw * multiIf(down, {{float .DownInterfaceWeight}}, metric IN {{strs .TimeMetrics}}, {{float .TimeWeight}}, 1) AS deviation
    FROM (
        SELECT spike_id, host, ws, metric, cpu, device, mode, any(floor_abs) AS floor_abs,
            maxIf(reading, is_during) AS during,
            -- The interval of the during rate, and the window's length:
            -- a stall of W seconds inside an interval of L shows at W/L.
            argMaxIf(ce - cs, reading, is_during) AS during_len,
            any(we) - ws AS window_len,
            groupArrayIf(reading, is_base) AS rates,
            -- A workload cgroup the agent did not report in enough of the
            -- baseline (fresh) is judged against what it did report, and
            -- against zero when that is nothing (suspects_leaves.go).
            length(rates) < {{.MinBaselineIntervals}} AND startsWith(metric, {{str .FreshPrefix}}) AS fresh,
            if(empty(rates), 0, arrayReduce('quantileExactInclusive(0.5)', rates)) AS base,
            if(empty(rates), 0, arrayReduce('quantileExactInclusive(0.5)', arrayMap(r -> abs(r - base), rates))) AS mad,
            maxIf(down_iface, is_during) AS down
        FROM (
            SELECT w.spike_id AS spike_id, w.host AS host, w.ws AS ws, c.metric AS metric, c.cpu AS cpu, c.device AS device, c.mode AS mode,
                c.reading AS reading, c.down_iface AS down_iface, c.floor_abs AS floor_abs, c.cs AS cs, c.ce AS ce, w.we AS we,
                c.cs < w.we + {{.MarginMS}} AND c.ce > w.ws - {{.MarginMS}} AS is_during,
                c.cs >= w.ws - {{.BaselineMS}} AND c.ce <= w.ws - {{.GuardMS}}
                    AND NOT arrayExists(o -> c.cs < o.2 + {{.MarginMS}} AND c.ce > o.1 - {{.MarginMS}}, w.others) AS is_base
            FROM (
                SELECT host, metric, cpu, device, mode, cs, cs + len_ms AS ce, down_iface,
                    -- A rate per second, but a disk's latency is per IO already.
                    if(per_op, v, v * 1000 / len_ms) AS reading,
                    {{.FloorSQL}} AS floor_abs, intDiv(cs, {{.SlotMS}}) AS slot
                FROM (
                    SELECT toString(host) AS host, toString(metric) AS metric, cpu,
                        multiIf(device != '' AND attrs['spikehunt.counter'] != '', concat(device, ':', attrs['spikehunt.counter']),
                                device != '', toString(device),
                                metric = 'spikehunt.pressure.stall_time', attrs['spikehunt.pressure.resource'], '') AS device,
                        toString(mode) AS mode,
                        toUnixTimestamp64Milli(ts_start) AS cs, toInt64(interval_ms) AS len_ms, value AS v,
                        metric = 'system.network.packet.count' AND mode = 'receive'
                            AND attrs['spikehunt.network.operstate'] NOT IN ({{.NotDownSQL}}) AS down_iface,
                        false AS per_op
                    FROM counters
                    WHERE host IN {{strs .Hosts}} AND ts_start >= {{ms .From}} AND ts_start < {{ms .To}} AND interval_ms > 0 AND {{.NotSelfTelemetrySQL}}
                        AND NOT (metric = 'system.cpu.time' AND mode = 'idle') AND metric != 'system.disk.operation_time'
                    UNION ALL
                    -- A disk's operation time over the operations of the same
                    -- reading: seconds per IO (suspects_disk.go).
                    SELECT host, {{str .DiskLatencyMetric}} AS metric, cpu, device, mode, cs, len_ms,
                        op_time / greatest(ops, {{.DiskLatencyMinOps}}) AS v, false AS down_iface, true AS per_op
                    FROM (
                        SELECT toString(host) AS host, cpu, toString(device) AS device, toString(mode) AS mode,
                            toUnixTimestamp64Milli(ts_start) AS cs, toInt64(interval_ms) AS len_ms,
                            sumIf(value, metric = 'system.disk.operation_time') AS op_time,
                            sumIf(value, metric = 'system.disk.operations') AS ops,
                            countIf(metric = 'system.disk.operation_time') AS timed
                        FROM counters
                        WHERE host IN {{strs .Hosts}} AND ts_start >= {{ms .From}} AND ts_start < {{ms .To}} AND interval_ms > 0
                            AND metric IN ('system.disk.operation_time', 'system.disk.operations')
                        GROUP BY host, cpu, device, mode, cs, len_ms
                    )
                    WHERE timed > 0
                    UNION ALL
                    -- Gauges (interval_ms = 0) become growth between consecutive readings.
                    SELECT host, metric, cpu, device, mode, prev_t AS cs, t - prev_t AS len_ms, value - prev_v AS v, false AS down_iface, false AS per_op
                    FROM (
                        SELECT toString(host) AS host, toString(metric) AS metric, cpu,
                            toString(device) AS device, toString(mode) AS mode,
                            toUnixTimestamp64Milli(ts_start) AS t, value,
                            lagInFrame(t) OVER s AS prev_t, lagInFrame(value) OVER s AS prev_v, row_number() OVER s AS rn
                        FROM counters
                        WHERE host IN {{strs .Hosts}} AND ts_start >= {{ms .From}} - INTERVAL 1 MINUTE AND ts_start < {{ms .To}} AND interval_ms = 0 AND {{.NotSelfTelemetrySQL}}
                        WINDOW s AS (PARTITION BY host, metric, cpu, device, mode ORDER BY ts_start ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
                    )
                    WHERE rn > 1 AND t > prev_t
                )
            ) AS c
            INNER JOIN (
                SELECT x.spike_id AS spike_id, x.host AS host, x.ws AS ws, x.we AS we, o.others AS others,
                    arrayJoin(range(intDiv(x.ws - {{.BaselineMS}} - {{.MaxCounterIntervalMS}}, {{.SlotMS}}), intDiv(x.we + {{.MarginMS}}, {{.SlotMS}}) + 1)) AS slot
                FROM ({{.WindowsSQL}}) AS x
                LEFT JOIN (
                    -- Without FINAL: an outdated version of a window only
                    -- keeps a few more intervals out of the baseline, and a
                    -- FINAL over a table that every pass rewrites costs more
                    -- than the rest of the query.
                    SELECT toString(host) AS host,
                        groupArray((toUnixTimestamp64Milli(window_start), toUnixTimestamp64Milli(window_end))) AS others
                    FROM spikes
                    WHERE service = {{str .Service}} AND is_deleted = 0 AND host IN {{strs .Hosts}}
                        AND window_end > {{ms .From}} AND window_start < {{ms .To}}
                    GROUP BY host
                ) AS o ON x.host = o.host
            ) AS w ON c.host = w.host AND c.slot = w.slot
            WHERE is_during OR is_base
        )
        GROUP BY spike_id, host, ws, metric, cpu, device, mode
        HAVING (length(rates) >= {{.MinBaselineIntervals}} OR fresh) AND countIf(is_during) > 0
    )
)
WHERE raw >= {{float .MinDeviation}} AND rose_enough
ORDER BY spike_id, deviation DESC, metric, mode, device, cpu
LIMIT {{.Fetch}} BY spike_id`)

// suspectRow is one ranked suspect of one window.
type suspectRow struct {
	spikeID, host string
	start         time.Time
	Suspect
}

func querySuspects(ctx context.Context, st store.Store, service string, ch suspectChunk, c SuspectConfig) ([]suspectRow, error) {
	var out []suspectRow
	err := st.Query(ctx, suspectsSQL(service, ch, c), func(b store.Block) error {
		strs, err := columns[string](b, "spike_id", "host", "metric", "device", "mode")
		if err != nil {
			return err
		}
		ws, err := column[int64](b, "ws")
		if err != nil {
			return err
		}
		cpu, err := column[int16](b, "cpu")
		if err != nil {
			return err
		}
		fl, err := columns[float64](b, "base", "during", "deviation")
		if err != nil {
			return err
		}
		for i := 0; i < b.Rows; i++ {
			out = append(out, suspectRow{strs[0].Row(i), strs[1].Row(i), time.UnixMilli(ws.Row(i)).UTC(), Suspect{
				Metric: strs[2].Row(i), CPU: int(cpu.Row(i)), Device: strs[3].Row(i), Mode: strs[4].Row(i),
				Baseline: fl[0].Row(i), During: fl[1].Row(i), Deviation: fl[2].Row(i),
			}})
		}
		return nil
	}, bigQuery)
	if err != nil {
		return nil, fmt.Errorf("detect: suspects of %d spike windows of %s: %w", ch.windows, service, err)
	}
	return preferLeaves(out, c.Max), nil
}

// rankSuspects computes and writes the suspects of the windows that need
// them — those starting in [From, To), those that ended within Settle
// before From (their counters may have been late), and the changed ones —
// and retracts the suspect rows those windows no longer have, along with
// every suspect of the retracted windows. It returns the rows written.
func rankSuspects(ctx context.Context, st store.Store, cfg *Config, service string, windows []SpikeWindow, retracted []string, stamp time.Time) (int, error) {
	c := cfg.Suspects
	settled := cfg.From.Add(-c.Settle)
	var todo []SpikeWindow
	var changed []string // changed windows the time condition below does not cover
	for _, w := range windows {
		inRange := !w.Start.Before(cfg.From) || w.End.After(settled)
		if inRange || w.Changed {
			todo = append(todo, w)
		}
		if w.Changed && !inRange {
			changed = append(changed, w.ID)
		}
	}
	slices.SortFunc(todo, func(a, b SpikeWindow) int { return a.Start.Compare(b.Start) })
	need := fmt.Sprintf("(window_start >= %s OR window_end > %s", msLit(cfg.From), msLit(settled))
	if len(changed) > 0 {
		need += " OR spike_id IN " + strList(changed)
	}
	need += ")"
	if len(todo) == 0 && len(retracted) == 0 {
		return 0, nil
	}
	chunkOf := func(ws []SpikeWindow) suspectChunk {
		first, last := ws[0], ws[len(ws)-1]
		hosts := make([]string, 0, len(ws))
		for _, w := range ws {
			hosts = append(hosts, w.Host)
		}
		slices.Sort(hosts)
		ch := suspectChunk{
			hosts: slices.Compact(hosts),
			where: fmt.Sprintf("service = %s AND detected_at = %s AND is_deleted = 0 AND window_start >= %s AND window_start <= %s AND %s",
				store.QuoteString(service), msLit(stamp), msLit(first.Start), msLit(last.Start), need),
			windows: len(ws),
			from:    first.Start.Add(-c.Baseline - maxCounterInterval),
		}
		for _, w := range ws {
			if end := w.End.Add(c.Margin + time.Millisecond); end.After(ch.to) {
				ch.to = end
			}
		}
		return ch
	}
	// Hosts without counters (no agent, or a service measured from
	// elsewhere) have no suspects: a probe spares the join, whose window
	// side alone costs ~0.1 s for a chunk of 20,000 windows. When none of
	// the hosts has counters, the windows are one chunk: no query, one
	// retraction.
	counters, perChunk := false, len(todo)
	if len(todo) > 0 {
		var err error
		if counters, err = hasCounters(ctx, st, chunkOf(todo)); err != nil {
			return 0, err
		}
	}
	if counters {
		var err error
		if perChunk, err = windowsPerChunk(ctx, st, todo, cfg.To, c); err != nil {
			return 0, err
		}
	}
	// With several chunks, each is probed on its own.
	probeEach := counters && perChunk < len(todo)
	written := 0
	for len(todo) > 0 {
		// A chunk ends between two distinct starts: it is a time range.
		n := min(len(todo), perChunk)
		for n < len(todo) && todo[n].Start.Equal(todo[n-1].Start) {
			n++
		}
		chunk := chunkOf(todo[:n])
		first, last := todo[0], todo[n-1]
		probe := counters
		if probeEach {
			var err error
			if probe, err = hasCounters(ctx, st, chunk); err != nil {
				return written, err
			}
		}
		todo = todo[n:]
		var rows []suspectRow
		if probe {
			var err error
			if rows, err = querySuspects(ctx, st, service, chunk, c); err != nil {
				return written, err
			}
		}
		if err := writeSuspects(ctx, st, service, rows, stamp); err != nil {
			return written, err
		}
		written += len(rows)
		if err := retractSuspects(ctx, st, service, "SELECT spike_id FROM spikes WHERE "+chunk.where, first.Start, last.Start, stamp); err != nil {
			return written, err
		}
	}
	if len(retracted) > 0 {
		r := newSpikeRange(cfg)
		if err := retractSuspects(ctx, st, service, quotedList(retracted), r.writeFrom, r.to, stamp); err != nil {
			return written, err
		}
	}
	return written, nil
}

// hasCounters reports whether any counter row of the chunk's hosts lies in
// the range its query reads (gauges from a minute earlier).
func hasCounters(ctx context.Context, st store.Store, ch suspectChunk) (bool, error) {
	q := fmt.Sprintf(`SELECT toUInt64(count()) AS n FROM (SELECT 1 FROM counters WHERE host IN %s AND ts_start >= %s - INTERVAL 1 MINUTE AND ts_start < %s LIMIT 1)`,
		strList(ch.hosts), msLit(ch.from), msLit(ch.to))
	n, err := scalar[uint64](ctx, st, q, "n", bigQuery)
	if err != nil {
		return false, fmt.Errorf("detect: counters of %d hosts: %w", len(ch.hosts), err)
	}
	return n > 0, nil
}

// windowsPerChunk sizes the chunks of rankSuspects: as many windows as
// fit in ChunkBytes at the counter rows per second the windows' hosts
// produced over the last 15 minutes before to (16 bytes a baseline rate),
// at most ChunkWindows.
func windowsPerChunk(ctx context.Context, st store.Store, todo []SpikeWindow, to time.Time, c SuspectConfig) (int, error) {
	if len(todo) == 0 {
		return c.ChunkWindows, nil
	}
	hosts := make([]string, 0, len(todo))
	for _, w := range todo {
		hosts = append(hosts, w.Host)
	}
	slices.Sort(hosts)
	hosts = slices.Compact(hosts)
	const span = 15 * time.Minute
	q := fmt.Sprintf(`SELECT toFloat64(count()) / greatest(1, uniqExact(host)) / %d AS per_host_per_s
FROM counters WHERE host IN %s AND ts_start >= %s AND ts_start < %s`,
		int64(span/time.Second), strList(hosts), msLit(to.Add(-span)), msLit(to))
	rate, err := scalar[float64](ctx, st, q, "per_host_per_s", bigQuery)
	if err != nil {
		return 0, fmt.Errorf("detect: size suspect chunks: %w", err)
	}
	perWindow := rate * c.Baseline.Seconds() * 16
	if perWindow <= 0 {
		return c.ChunkWindows, nil
	}
	return max(1, min(c.ChunkWindows, int(float64(c.ChunkBytes)/perWindow))), nil
}

func writeSuspects(ctx context.Context, st store.Store, service string, rows []suspectRow, stamp time.Time) error {
	if len(rows) == 0 {
		return nil
	}
	var (
		id                                   proto.ColStr
		svc, host, metric, device, mode, ver = lowCardinality(), lowCardinality(), lowCardinality(), lowCardinality(), lowCardinality(), lowCardinality()
		start, detectedAt                    = dateTime64ms(), dateTime64ms()
		rank, deleted                        proto.ColUInt8
		cpu                                  proto.ColInt16
		baseline, during, deviation          proto.ColFloat64
	)
	for _, r := range rows {
		id.Append(r.spikeID)
		svc.Append(service)
		host.Append(r.host)
		start.Append(r.start)
		rank.Append(uint8(r.Rank))
		metric.Append(r.Metric)
		cpu.Append(int16(r.CPU))
		device.Append(r.Device)
		mode.Append(r.Mode)
		baseline.Append(r.Baseline)
		during.Append(r.During)
		deviation.Append(r.Deviation)
		ver.Append(DetectorVersion)
		detectedAt.Append(stamp)
		deleted.Append(0)
	}
	input := proto.Input{
		{Name: "spike_id", Data: &id}, {Name: "service", Data: svc}, {Name: "host", Data: host},
		{Name: "window_start", Data: start}, {Name: "rank", Data: &rank}, {Name: "metric", Data: metric},
		{Name: "cpu", Data: &cpu}, {Name: "device", Data: device}, {Name: "mode", Data: mode},
		{Name: "baseline", Data: &baseline}, {Name: "during", Data: &during}, {Name: "deviation", Data: &deviation},
		{Name: "detector_version", Data: ver}, {Name: "detected_at", Data: detectedAt}, {Name: "is_deleted", Data: &deleted},
	}
	if err := st.Insert(ctx, "spike_suspects", input); err != nil {
		return fmt.Errorf("detect: write %d suspects of %s: %w", len(rows), service, err)
	}
	return nil
}

// retractSuspects retracts the live suspect rows of the spikes in ids (a
// subquery or a list of quoted ids), whose windows start in
// [from, to], that the pass at stamp did not write.
func retractSuspects(ctx context.Context, st store.Store, service, ids string, from, to, stamp time.Time) error {
	if err := st.Exec(ctx, retractSuspectsSQL(service, ids, from, to, stamp), bigQuery); err != nil {
		return fmt.Errorf("detect: retract stale suspects of %s: %w", service, err)
	}
	return nil
}

// retractSuspectsSQL is retractSuspects' statement: the rows copied with
// is_deleted = 1 and the pass's version.
func retractSuspectsSQL(service, ids string, from, to, stamp time.Time) string {
	return render(retractSuspectsTmpl, retractSuspectsParams{
		Service: service, IDsSQL: ids, From: from, To: to, Version: DetectorVersion, Stamp: stamp,
	})
}

// retractSuspectsParams are the values retractSuspectsTmpl names.
type retractSuspectsParams struct {
	Service string
	// IDsSQL is the inside of IN (…): a subquery or a list of quoted ids.
	IDsSQL string
	// The spikes' windows start in [From, To].
	From, To time.Time
	// Rows older than Stamp are retracted, by rows of Version at Stamp.
	Version string
	Stamp   time.Time
}

var retractSuspectsTmpl = sqlTemplate("retract suspects", `INSERT INTO spike_suspects (spike_id, service, host, window_start, rank, metric, cpu, device, mode,
    baseline, during, deviation, detector_version, detected_at, is_deleted)
SELECT spike_id, service, host, window_start, rank, metric, cpu, device, mode, baseline, during, deviation, {{str .Version}}, {{ms .Stamp}}, 1
FROM spike_suspects FINAL
WHERE service = {{str .Service}} AND window_start >= {{ms .From}} AND window_start <= {{ms .To}} AND spike_id IN ({{.IDsSQL}})
    AND is_deleted = 0 AND detected_at < {{ms .Stamp}}`)

// attachSuspects reads the live suspects of windows back from the table:
// windows that did not change keep the suspects an earlier pass wrote.
func attachSuspects(ctx context.Context, st store.Store, service string, windows []SpikeWindow) error {
	if len(windows) == 0 {
		return nil
	}
	from, to := windows[0].Start, windows[0].Start
	byID := make(map[string]*SpikeWindow, len(windows))
	for i := range windows {
		w := &windows[i]
		w.Suspects = nil
		byID[w.ID] = w
		if w.Start.Before(from) {
			from = w.Start
		}
		if w.Start.After(to) {
			to = w.Start
		}
	}
	q := fmt.Sprintf(`SELECT spike_id, toUInt8(rank) AS rank, toString(metric) AS metric, cpu, toString(device) AS device, toString(mode) AS mode,
    baseline, during, deviation
FROM spike_suspects FINAL
WHERE service = %s AND window_start >= %s AND window_start <= %s AND is_deleted = 0
ORDER BY spike_id, rank`, store.QuoteString(service), msLit(from), msLit(to))
	err := st.Query(ctx, q, func(b store.Block) error {
		strs, err := columns[string](b, "spike_id", "metric", "device", "mode")
		if err != nil {
			return err
		}
		rank, err := column[uint8](b, "rank")
		if err != nil {
			return err
		}
		cpu, err := column[int16](b, "cpu")
		if err != nil {
			return err
		}
		fl, err := columns[float64](b, "baseline", "during", "deviation")
		if err != nil {
			return err
		}
		for i := 0; i < b.Rows; i++ {
			w := byID[strs[0].Row(i)]
			if w == nil {
				continue
			}
			w.Suspects = append(w.Suspects, Suspect{
				Rank: int(rank.Row(i)), Metric: strs[1].Row(i), CPU: int(cpu.Row(i)), Device: strs[2].Row(i), Mode: strs[3].Row(i),
				Baseline: fl[0].Row(i), During: fl[1].Row(i), Deviation: fl[2].Row(i),
			})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("detect: read suspects of %s: %w", service, err)
	}
	return nil
}
