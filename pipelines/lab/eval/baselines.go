package eval

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/pipelines/lab/sim"
)

// The baselines are the latency alerts a competent SRE writes today,
// run over the same stored requests spikehunt's detectors read, so that
// make bench-peers-detect scores them next to spikehunt's windows
// (docs/benchmarks.md, "Detection against baselines"). Each is one query
// over `requests`; they see exact weighted p99s (quantileExactWeighted
// over the kept requests and their sampling weights), not a sketch's, so
// what they miss they miss by their rule, not by sketch error. Every rule
// is evaluated on each 1-minute window, first with no `for:` clause (the
// most sensitive form of each rule), then as an alert with a 1-minute
// pending period (`for: 1m`: it fires on the second consecutive minute
// over the line), the shortest users set to keep one noisy evaluation
// from paging; those methods carry PendingSuffix.

// Detection methods, as the benchmark names them.
const (
	MethodSpikehunt = "spikehunt"
	MethodFleetP99  = "fleet_p99"
	MethodHostP99   = "host_p99"
	MethodMAD       = "mad_outlier"
)

// PendingSuffix names a rule evaluated as an alert with a 1-minute
// pending period (Pending).
const PendingSuffix = "_for1m"

// Methods lists every method, spikehunt first.
func Methods() []string {
	return []string{MethodSpikehunt, MethodFleetP99, MethodHostP99, MethodMAD,
		MethodFleetP99 + PendingSuffix, MethodHostP99 + PendingSuffix, MethodMAD + PendingSuffix}
}

// BaselineMethods lists the baseline rules.
func BaselineMethods() []string { return Methods()[1:] }

// Pending is what an alert with a 1-minute pending period fires on, given
// the minutes its rule was over the line (in host then time order): the
// minutes of every run of two or more consecutive ones of a host (or of
// the fleet). The run's first minute is kept too: the alert, once it
// fires, names the breach since it began pending.
func Pending(flags []Flag) []Flag {
	next := func(a, b Flag) bool { return a.Host == b.Host && b.Minute.Equal(a.Minute.Add(time.Minute)) }
	out := []Flag{}
	for i, f := range flags {
		if (i > 0 && next(flags[i-1], f)) || (i+1 < len(flags) && next(f, flags[i+1])) {
			out = append(out, f)
		}
	}
	return out
}

// The rules' constants, chosen before any scenario was scored:
//   - alertHeadroom: a static threshold is set above the worst normal
//     minutes: the 99th percentile of the series over a healthy hour,
//     plus half again (a margin users add so that the alert does not page
//     on the healthy fleet's own tail).
//   - madTolerance and madScale: Datadog's outlier monitor with MAD flags
//     a member more than tolerance × MAD from the median of its group;
//     3.0 is the strictest of the tolerances its monitor form offers
//     (0.33, 1.0, 3.0), the one to pick on a fleet of hundreds, and the
//     MAD is scaled by 1.4826, the usual constant that makes it a standard
//     deviation on a normal body (an unscaled MAD would flag more). Only
//     the slow side alerts: a host faster than its peers is not an
//     incident.
//   - madMinHosts: the monitor needs a group of three or more.
const (
	alertHeadroom  = 1.5
	madTolerance   = 3.0
	madScale       = 1.4826
	madMinHosts    = 3
	calibrationLen = time.Hour
)

// BaselineRules are the thresholds of the three baseline rules.
type BaselineRules struct {
	// FleetP99 is the fleet alert's threshold on the p99 of every request
	// of the service in a minute (one series).
	FleetP99 time.Duration
	// HostP99 is the per-host alert's threshold on each host's p99 in a
	// minute (one series per host, one threshold for all: one alert rule
	// grouped by host).
	HostP99 time.Duration
	// MADTolerance: a host's minute p99 is an outlier when it passes the
	// hosts' median p99 that minute by more than MADTolerance × 1.4826 ×
	// their median absolute deviation.
	MADTolerance float64
}

func (r BaselineRules) String() string {
	return fmt.Sprintf("fleet p99 > %v, host p99 > %v, MAD tolerance %g", r.FleetP99.Round(10*time.Microsecond), r.HostP99.Round(10*time.Microsecond), r.MADTolerance)
}

// CalibrationConfig is the healthy counterpart of cfg that the baseline
// thresholds are drawn from: the same fleet and latency body (hosts,
// request rate, median, shape, sampling), no stalls, no noise, no creep,
// in the hour before cfg starts and under its own service name, so that
// it can share cfg's store. It stands for the healthy week a user looked
// at when writing the rule; nothing of cfg's own run or truth goes in.
// endpoint-stall's storefront routes are not simulated in a healthy run:
// its calibration has the default service's routes (a body ~10% slower
// on average).
func CalibrationConfig(cfg sim.Config) sim.Config {
	c := cfg.Defaults()
	d := min(c.Duration, calibrationLen)
	return sim.Config{
		Scenario: sim.Healthy, Service: c.Service + "-calibration", Seed: c.Seed ^ 0xca1_1b7a7e,
		Hosts: c.Hosts, HWClasses: c.HWClasses, Start: c.Start.Add(-d), Duration: d,
		RPS: c.RPS, MedianUS: c.MedianUS, Sigma: c.Sigma, SampleEvery: c.SampleEvery,
		CPUs: c.CPUs, CounterStep: c.CounterStep,
	}
}

// CalibrationKey names the calibrations that give the same thresholds:
// runs of one fleet size and body share one.
func CalibrationKey(cfg sim.Config) string {
	c := CalibrationConfig(cfg)
	return fmt.Sprintf("%d hosts, %g req/s, median %gµs, σ %g, 1/%d, %s", c.Hosts, c.RPS, c.MedianUS, c.Sigma, c.SampleEvery, c.Duration)
}

// Calibrate draws the rules' thresholds from a healthy fleet's stored
// requests, service's over [from, to): each static threshold is
// alertHeadroom × the 99th percentile of its series' minutes.
func Calibrate(ctx context.Context, st store.Store, service string, from, to time.Time) (BaselineRules, error) {
	w := baselineWindow{Service: service, From: from, To: to}
	var fleet, host float64
	err := st.Query(ctx, render(calibrateTmpl, w), func(b store.Block) error {
		cols, err := store.Columns[float64](b, "fleet_p99_us", "host_p99_us")
		if err != nil {
			return err
		}
		if b.Rows > 0 {
			fleet, host = cols[0].Row(0), cols[1].Row(0)
		}
		return nil
	})
	if err != nil {
		return BaselineRules{}, fmt.Errorf("eval: calibrate the baselines on %s: %w", service, err)
	}
	if !(fleet > 0 && host > 0) {
		return BaselineRules{}, fmt.Errorf("eval: calibrate the baselines: service %q has no requests in [%s, %s): load its healthy fleet first (CalibrationConfig)",
			service, from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	us := func(v float64) time.Duration { return time.Duration(alertHeadroom * v * float64(time.Microsecond)) }
	return BaselineRules{FleetP99: us(fleet), HostP99: us(host), MADTolerance: madTolerance}, nil
}

// Flag is one window a baseline rule alerted on: one host's minute, or
// the whole fleet's minute (Host "") for the fleet rule, which names no
// host.
type Flag struct {
	Host   string
	Minute time.Time
}

// BaselineRun is what the three rules alerted on over one service's data.
type BaselineRun struct {
	// Fleet maps every host with requests in the range to its hardware
	// class.
	Fleet map[string]string
	// Flags are each rule's alerts by method, in host then time order.
	Flags map[string][]Flag
}

// RunBaselines evaluates the three rules on every minute of service's
// requests in [from, to).
func RunBaselines(ctx context.Context, st store.Store, service string, from, to time.Time, rules BaselineRules) (BaselineRun, error) {
	w := baselineWindow{Service: service, From: from, To: to}
	out := BaselineRun{Fleet: map[string]string{}, Flags: map[string][]Flag{}}
	err := st.Query(ctx, render(fleetHostsTmpl, w), func(b store.Block) error {
		cols, err := store.Columns[string](b, "host", "hw_class")
		if err != nil {
			return err
		}
		for i := 0; i < b.Rows; i++ {
			out.Fleet[cols[0].Row(i)] = cols[1].Row(i)
		}
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("eval: baselines: the fleet of %s: %w", service, err)
	}
	for _, q := range []struct {
		method string
		sql    string
	}{
		{MethodFleetP99, render(fleetP99Tmpl, thresholdParams{w, rules.FleetP99.Microseconds()})},
		{MethodHostP99, render(hostP99Tmpl, thresholdParams{w, rules.HostP99.Microseconds()})},
		{MethodMAD, render(madTmpl, madParams{w, rules.MADTolerance, madScale, madMinHosts})},
	} {
		flags := []Flag{}
		err := st.Query(ctx, q.sql, func(b store.Block) error {
			minute, err := store.Column[int64](b, "minute")
			if err != nil {
				return err
			}
			var host func(int) string
			if q.method != MethodFleetP99 {
				h, err := store.Column[string](b, "host")
				if err != nil {
					return err
				}
				host = h.Row
			}
			for i := 0; i < b.Rows; i++ {
				f := Flag{Minute: time.Unix(minute.Row(i), 0).UTC()}
				if host != nil {
					f.Host = host(i)
				}
				flags = append(flags, f)
			}
			return nil
		})
		if err != nil {
			return out, fmt.Errorf("eval: baseline %s on %s: %w", q.method, service, err)
		}
		out.Flags[q.method] = flags
		out.Flags[q.method+PendingSuffix] = Pending(flags)
	}
	return out, nil
}

// baselineWindow is the data every rule reads: one service's requests in
// [From, To).
type baselineWindow struct {
	Service  string
	From, To time.Time
}

type thresholdParams struct {
	baselineWindow
	ThresholdUS int64
}

type madParams struct {
	baselineWindow
	Tolerance, Scale float64
	MinHosts         int
}

var baselineFuncs = template.FuncMap{
	"str":   store.QuoteString,
	"sec":   func(t time.Time) string { return "toDateTime(" + strconv.FormatInt(t.Unix(), 10) + ", 'UTC')" },
	"float": func(f float64) string { return "toFloat64(" + strconv.FormatFloat(f, 'g', -1, 64) + ")" },
}

// The p99 series every rule reads: per minute, of the fleet or of each
// host, the exact weighted p99 of the kept requests.
const baselineSeries = `
{{define "where"}}service = {{str .Service}} AND ts >= {{sec .From}} AND ts < {{sec .To}}{{end}}
{{define "fleet_series"}}SELECT toStartOfMinute(ts) AS minute, toFloat64(quantileExactWeighted(0.99)(latency_us, weight)) AS p99
    FROM requests WHERE {{template "where" .}}
    GROUP BY minute{{end}}
{{define "host_series"}}SELECT host, toStartOfMinute(ts) AS minute, toFloat64(quantileExactWeighted(0.99)(latency_us, weight)) AS p99
    FROM requests WHERE {{template "where" .}}
    GROUP BY host, minute{{end}}`

func baselineTemplate(name, text string) *template.Template {
	return template.Must(template.Must(template.New(name).Funcs(baselineFuncs).Parse(baselineSeries)).Parse(text))
}

var (
	calibrateTmpl = baselineTemplate("calibrate", `SELECT
    ifNull((SELECT quantileExactInclusive(0.99)(p99) FROM ({{template "fleet_series" .}})), 0) AS fleet_p99_us,
    ifNull((SELECT quantileExactInclusive(0.99)(p99) FROM ({{template "host_series" .}})), 0) AS host_p99_us`)

	fleetHostsTmpl = baselineTemplate("fleet hosts", `SELECT toString(host) AS host, toString(any(hw_class)) AS hw_class
FROM requests WHERE {{template "where" .}}
GROUP BY host`)

	// Grafana/Prometheus style: one series for the fleet.
	fleetP99Tmpl = baselineTemplate("fleet p99", `SELECT toInt64(toUnixTimestamp(minute)) AS minute
FROM ({{template "fleet_series" .}})
WHERE p99 > {{.ThresholdUS}}
ORDER BY minute`)

	// The same rule grouped by host.
	hostP99Tmpl = baselineTemplate("host p99", `SELECT toString(host) AS host, toInt64(toUnixTimestamp(minute)) AS minute
FROM ({{template "host_series" .}})
WHERE p99 > {{.ThresholdUS}}
ORDER BY host, minute`)

	// Datadog-style outlier monitor with MAD, each minute on its own.
	madTmpl = baselineTemplate("mad outlier", `SELECT toString(host) AS host, toInt64(toUnixTimestamp(minute)) AS minute
FROM (
    SELECT minute, groupArray(host) AS hosts, groupArray(p99) AS p99s,
        arrayReduce('quantileExactInclusive(0.5)', p99s) AS med,
        arrayReduce('quantileExactInclusive(0.5)', arrayMap(v -> abs(v - med), p99s)) AS mad
    FROM ({{template "host_series" .}})
    GROUP BY minute
    HAVING length(p99s) >= {{.MinHosts}}
)
ARRAY JOIN hosts AS host, p99s AS p99
WHERE p99 > med + {{float .Tolerance}} * {{float .Scale}} * mad
ORDER BY host, minute`)
)

// render executes t with params.
func render(t *template.Template, params any) string {
	var b strings.Builder
	if err := t.Execute(&b, params); err != nil {
		panic(fmt.Sprintf("eval: render %s: %v", t.Name(), err))
	}
	return b.String()
}
