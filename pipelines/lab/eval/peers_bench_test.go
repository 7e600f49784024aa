package eval

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/spikehunt/spikehunt/pipelines/lab/sim"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// BenchmarkPeersDetect is make bench-peers-detect: every eval scenario and
// variant once, scored for spikehunt and for the three baseline rules
// (baselines.go) over the same stored data, and a table per run and
// method: spike-window recall and precision, affected hosts found, alerts
// raised, and whether the fleet pattern shows. On thousand-spikes it
// reports peers.detect_recall_<method> and peers.detect_precision_<method>.
// The rules' thresholds come from a healthy run of the same fleet and
// body (CalibrationConfig), loaded once per CalibrationKey.
//
// SPIKEHUNT_EVAL_SCENARIOS and SPIKEHUNT_EVAL_VARIANTS (comma-separated
// names, as for the eval's tests) run only those; set one to "none" to
// run no run of its kind.
func BenchmarkPeersDetect(b *testing.B) {
	type run struct {
		name string
		cfg  sim.Config
	}
	var runs []run
	onlyS, onlyV := namesFrom("SPIKEHUNT_EVAL_SCENARIOS"), namesFrom("SPIKEHUNT_EVAL_VARIANTS")
	for _, cfg := range Scenarios(DefaultHosts, DefaultDuration, 1) {
		if len(onlyS) == 0 || onlyS[cfg.Scenario] {
			runs = append(runs, run{cfg.Scenario, cfg})
		}
	}
	for _, v := range Variants(1) {
		if len(onlyV) == 0 || onlyV[v.Name] {
			runs = append(runs, run{v.Name, v.Config})
		}
	}

	calibrated := map[string]BaselineRules{}
	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tmethod\trecall\tprecision\thosts found\talerts\tpattern\tclasses\t")
	for _, r := range runs {
		b.Run(r.name, func(b *testing.B) {
			ctx := context.Background()
			st := testenv.ClickHouse(b)
			res, err := RunScenario(ctx, st, r.cfg, Options{})
			if err != nil {
				b.Fatal(err)
			}
			key := CalibrationKey(r.cfg)
			rules, ok := calibrated[key]
			if !ok {
				cal := CalibrationConfig(r.cfg)
				if _, _, err := sim.Load(ctx, st, cal, nil, nil); err != nil {
					b.Fatal(err)
				}
				calEnd := cal.Start.Add(cal.Duration)
				if rules, err = Calibrate(ctx, st, cal.Service, cal.Start, calEnd); err != nil {
					b.Fatal(err)
				}
				calibrated[key] = rules
				// The rules on the healthy hour they were drawn from: the
				// alerts a user would have had to accept.
				healthy, err := RunBaselines(ctx, st, cal.Service, cal.Start, calEnd, rules)
				if err != nil {
					b.Fatal(err)
				}
				hostHours := float64(len(healthy.Fleet)) * cal.Duration.Hours()
				b.Logf("calibration (%s): %s; on the healthy hour: fleet %d alerts, host %.2f and MAD %.2f alerts per host-hour",
					key, rules, len(healthy.Flags[MethodFleetP99]),
					float64(len(healthy.Flags[MethodHostP99]))/hostHours, float64(len(healthy.Flags[MethodMAD]))/hostHours)
			}
			cfg := r.cfg.Defaults()
			end := cfg.Start.Add(cfg.Duration)
			br, err := RunBaselines(ctx, st, cfg.Service, cfg.Start, end, rules)
			if err != nil {
				b.Fatal(err)
			}
			scores := []MethodScore{ScoreSpikehunt(res)}
			for _, m := range BaselineMethods() {
				scores = append(scores, ScoreFlags(res.Truth, m, br.Flags[m], br.Fleet, cfg.Start, end))
			}
			for _, s := range scores {
				// Precision is 1 by convention when nothing was raised
				// (the BENCH line keeps it); the table says "-".
				precision := "-"
				if s.Windows.Detected > 0 {
					precision = fmt.Sprintf("%.3f", s.Windows.Precision())
				}
				row := fmt.Sprintf("%s\t%s\t%.3f\t%s\t%d/%d\t%d\t%s\t%s\t", r.name, s.Method, s.Windows.Recall(), precision,
					s.Windows.HostsFound, s.Windows.HostsTruth, s.Alerts, s.Pattern, strings.Join(s.Classes, ","))
				fmt.Fprintln(tw, row)
				b.Log(strings.ReplaceAll(row, "\t", "  "))
				if r.name == sim.ThousandSpikes {
					b.ReportMetric(s.Windows.Recall(), "peers.detect_recall_"+s.Method+":ratio")
					b.ReportMetric(s.Windows.Precision(), "peers.detect_precision_"+s.Method+":ratio")
				}
			}
		})
	}
	tw.Flush()
	// On stdout: a parent benchmark's log is not printed once it has
	// sub-benchmarks.
	fmt.Print("\nDetection against baselines: spike-window recall and precision; hosts found = hosts with a truth window found / hosts with one;\n" +
		"alerts = windows raised (a fleet minute once); pattern = the truth's class in the method's output (seen, missed, wrong, - for none to see).\n\n" + table.String())
}
