package dashboards

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// BenchmarkPanels runs every panel query of every dashboard over 24 h ×
// 300 hosts (SPIKEHUNT_BENCH_HOSTS, SPIKEHUNT_BENCH_HOURS) on the embedded
// engine, each over the whole range with Grafana's $__interval for it, and
// reports the slowest (median of three runs). Target: ≤ 1,000 ms each.
//
// The fleet is written with SQL rather than simulated (a simulated
// fleet-day would take an hour to load): latency_1s for every host-second,
// every host stalling 1 s every 15–20 min at its own phase; the detectors'
// spikes, suspects and patterns from a real pass over it; the agents' own
// figures every 10 s for every host; and the full set of kernel counters
// (per-CPU modes, softirqs, per-IRQ interrupts, NICs, disk, run delay,
// PSI) every second for the host the drill-down shows. A host's panels read
// only that host's rows through the primary key (counters is ordered by
// host first), so other hosts' kernel counters would not change their cost.
func BenchmarkPanels(b *testing.B) {
	hosts, hours := benchEnv("SPIKEHUNT_BENCH_HOSTS", 300), benchEnv("SPIKEHUNT_BENCH_HOURS", 24)
	ctx := context.Background()
	st := testenv.ClickHouse(b)
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		b.Fatal(err)
	}
	start := testenv.RecentDay().Add(24*time.Hour - time.Duration(hours)*time.Hour) // it ends at 00:00 today
	end := start.Add(time.Duration(hours) * time.Hour)
	began := time.Now()
	loadBenchFleet(b, st, start, hosts, hours)
	res, err := detect.Pass(ctx, st, detect.Config{Service: "checkout", From: start, To: end})
	if err != nil {
		b.Fatal(err)
	}
	for i, sp := range res.Spikes[:min(len(res.Spikes), 500)] {
		insertCapture(b, st, fmt.Sprintf("cap-%d", i), sp.Host, "perf", "fleet alert", "uploaded",
			sp.Start.Add(-30*time.Second), sp.End.Add(5*time.Second), []string{sp.ID})
	}
	if err := st.Exec(ctx, "OPTIMIZE TABLE counters FINAL"); err != nil {
		b.Fatal(err)
	}
	b.Logf("loaded %d hosts × %d h and detected %d spike windows in %s", hosts, hours, len(res.Spikes), time.Since(began).Round(time.Second))

	f := loadedFleet{st: st, hosts: hostNames(hosts), captured: "host-0000"}
	f.cfg.Service, f.cfg.HWClasses = "checkout", []string{"gen4", "gen5"}
	type timing struct {
		name string
		ms   float64
		rows int
	}
	var all []timing
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		all = all[:0]
		for _, bd := range Boards() {
			q := f.vars(bd, f.captured)
			q.From, q.To = start, end
			q.Interval = autoInterval(start, end, 0)
			queries := map[string]string{}
			for _, r := range bd.Rows {
				for _, p := range r.Panels {
					if p.SQL != "" {
						queries[bd.File+"/"+p.Key] = p.SQL
					}
				}
			}
			for _, a := range bd.Annotations {
				queries[bd.File+"/annotation"] = a.SQL
			}
			for name, sql := range queries {
				var runs []float64
				rows := 0
				x, err := q.Expand(sql)
				if err != nil {
					b.Fatal(err)
				}
				for k := 0; k < 3; k++ {
					// The engine's time and the native blocks' transfer, as
					// a client decoding them would see it; not store.Select's
					// rendering of every cell as text.
					rows = 0
					t0 := time.Now()
					err := st.Query(ctx, x, func(blk store.Block) error { rows += blk.Rows; return nil })
					runs = append(runs, float64(time.Since(t0).Microseconds())/1000)
					if err != nil {
						b.Fatalf("%s: %v\n%s", name, err, x)
					}
				}
				sort.Float64s(runs)
				all = append(all, timing{name, runs[1], rows})
			}
		}
	}
	b.StopTimer()
	sort.Slice(all, func(i, j int) bool { return all[i].ms > all[j].ms })
	for _, t := range all {
		b.Logf("%8.1f ms  %6d rows  %s", t.ms, t.rows, t.name)
	}
	b.ReportMetric(all[0].ms, "dashboards.slowest_panel_ms:ms")
	b.ReportMetric(float64(len(all)), "queries")
}

func benchEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func hostNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("host-%04d", i)
	}
	return out
}

func loadBenchFleet(b *testing.B, st store.Store, start time.Time, hosts, hours int) {
	ctx := context.Background()
	exec := func(q string) {
		if err := st.Exec(ctx, q); err != nil {
			b.Fatalf("%v\n%s", err, q)
		}
	}
	// Latency: per host-second, ~30 requests of ~4 ms (weighted 30 from one
	// kept request), a 1 s stall every 15–20 min at the host's own phase.
	period := "(900 + cityHash64(h, 11) % 301)"
	for hour := 0; hour < hours; hour++ {
		exec(fmt.Sprintf(`INSERT INTO latency_1s
SELECT toDateTime(%[1]d + s, 'UTC'), 'checkout', concat('host-', leftPad(toString(h), 4, '0')), if(h %% 2 = 0, 'gen4', 'gen5'),
    30, 1, lat, lat * 30, arrayReduce('quantilesTDigestWeightedState(0.5, 0.9, 0.99, 0.999)', [lat], [toUInt32(30)]),
    (CAST([], 'Array(UInt16)'), CAST([], 'Array(UInt64)')) -- no always-kept request
FROM (
    SELECT intDiv(number, %[2]d) + %[3]d AS s, number %% %[2]d AS h,
        toUInt32(if((s + %[4]s - cityHash64(h, 12) %% %[4]s) %% %[4]s = 0, 1000000, 3500 + cityHash64(number, %[3]d) %% 1000)) AS lat
    FROM numbers(%[5]d)
)`, start.Unix(), hosts, hour*3600, period, hosts*3600))
	}
	secs := hours * 3600
	// The agents' own figures, every 10 s on every host.
	exec(fmt.Sprintf(`INSERT INTO counters (ts_start, interval_ms, host, metric, cpu, device, mode, value)
SELECT toDateTime64(%[1]d + 10 * intDiv(number, %[2]d), 6, 'UTC'), if(m IN (1, 2, 3), 0, 10000),
    concat('host-', leftPad(toString(number %% %[2]d), 4, '0')),
    ['spikehunt.agent.requests.dropped', 'spikehunt.agent.spool.bytes', 'spikehunt.capture.active', 'spikehunt.capture.max_concurrent', 'spikehunt.agent.export.records'][m + 1],
    -1, '', ['queue_full', '', '', '', 'spans'][m + 1],
    [toFloat64(cityHash64(number) %% 1000 = 0), 0, toFloat64(cityHash64(number, 1) %% 50 = 0), 1, 300][m + 1]
FROM numbers(%[3]d) ARRAY JOIN [0, 1, 2, 3, 4] AS m`, start.Unix(), hosts, hosts*secs/10))
	// Ingest and detect instances.
	exec(fmt.Sprintf(`INSERT INTO counters (ts_start, interval_ms, host, metric, cpu, device, mode, value)
SELECT toDateTime64(%[1]d + 10 * number, 6, 'UTC'), if(m = 1, 0, 10000), concat('ingest-', toString(i)),
    ['spikehunt.ingest.rows', 'spikehunt.ingest.lag', 'spikehunt.ingest.dlq'][m + 1],
    -1, ['requests', 'otlp_spans', 'otlp_spans'][m + 1], ['', '', 'decode'][m + 1], [90000, 120, 0][m + 1]
FROM numbers(%[2]d) ARRAY JOIN [0, 1, 2] AS m ARRAY JOIN [0, 1, 2] AS i`, start.Unix(), secs/10))
	exec(fmt.Sprintf(`INSERT INTO counters (ts_start, interval_ms, host, metric, cpu, device, mode, value)
SELECT toDateTime64(%[1]d + 60 * number, 6, 'UTC'), 0, 'detect-0', 'spikehunt.detect.pass_seconds', -1, '', st, 0.5
FROM numbers(%[2]d) ARRAY JOIN ['total', 'spikes', 'suspects', 'patterns'] AS st`, start.Unix(), secs/60))
	// Every kernel counter of host-0000, every second: 8 CPUs, four NIC
	// queue IRQs.
	exec(fmt.Sprintf(`INSERT INTO counters (ts_start, interval_ms, host, metric, cpu, device, mode, value, attrs)
SELECT toDateTime64(%[1]d + s, 6, 'UTC'), 1000, 'host-0000', mm.1, toInt16(cpu0),
    if(mm.1 = 'spikehunt.interrupts', toString(30 + mm.3), ''), mm.2,
    toFloat64(cityHash64(s, cpu0, mm.3) %% 100) / 1000,
    if(mm.1 = 'spikehunt.interrupts', map('spikehunt.irq.device', concat('eth0-TxRx-', toString(mm.3))), map())
FROM (SELECT number AS s FROM numbers(%[2]d))
ARRAY JOIN [
    ('system.cpu.time', 'user', 0), ('system.cpu.time', 'system', 0), ('system.cpu.time', 'idle', 0),
    ('system.cpu.time', 'iowait', 0), ('system.cpu.time', 'irq', 0), ('system.cpu.time', 'softirq', 0),
    ('spikehunt.softirqs', 'NET_RX', 0), ('spikehunt.softirqs', 'TIMER', 0), ('spikehunt.softirqs', 'BLOCK', 0),
    ('spikehunt.cpu.run_delay', '', 0),
    ('spikehunt.interrupts', '', 0), ('spikehunt.interrupts', '', 1), ('spikehunt.interrupts', '', 2), ('spikehunt.interrupts', '', 3)
] AS mm
ARRAY JOIN range(8) AS cpu0`, start.Unix(), secs))
	exec(fmt.Sprintf(`INSERT INTO counters (ts_start, interval_ms, host, metric, cpu, device, mode, value, attrs)
SELECT toDateTime64(%[1]d + s, 6, 'UTC'), 1000, 'host-0000', x.1, -1, x.2, x.3, toFloat64(cityHash64(s, x.1, x.3) %% 1000), x.4
FROM (SELECT number AS s FROM numbers(%[2]d))
ARRAY JOIN [
    ('system.network.packet.count', 'eth0', 'receive', map('spikehunt.network.operstate', 'up')),
    ('system.network.packet.count', 'eth0', 'transmit', map('spikehunt.network.operstate', 'up')),
    ('system.network.packet.dropped', 'eth0', 'receive', map('spikehunt.network.operstate', 'up')),
    ('system.network.packet.count', 'eth1', 'receive', map('spikehunt.network.operstate', 'down')),
    ('system.network.packet.count', 'eth1', 'transmit', map('spikehunt.network.operstate', 'down')),
    ('system.network.packet.dropped', 'eth1', 'receive', map('spikehunt.network.operstate', 'down')),
    ('spikehunt.network.pause_frames', 'eth0', 'receive', map('spikehunt.counter', 'rx_pause')),
    ('system.disk.operations', 'sda', 'read', map()), ('system.disk.operations', 'sda', 'write', map()),
    ('system.disk.operation_time', 'sda', 'read', map()), ('system.disk.operation_time', 'sda', 'write', map()),
    ('system.disk.io_time', 'sda', '', map()),
    ('spikehunt.pressure.stall_time', 'cpu', 'some', map()), ('spikehunt.pressure.stall_time', 'memory', 'some', map()),
    ('spikehunt.pressure.stall_time', 'io', 'some', map())
] AS x`, start.Unix(), secs))
}
