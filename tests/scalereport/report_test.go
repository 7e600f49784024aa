package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// testdata/bench.lines holds exact power laws, so every figure below can
// be checked by hand:
//   - ingest: 2, 6, 20 s at 1,000, 3,000, 10,000 hosts (exponent 1),
//     500 MiB flat (exponent 0: under its 6,144 MiB budget at any size);
//   - detect: 2.5 and 7.5 s at 1,000 and 3,000 (exponent 1), so 25 s at
//     10,000 and the 30 s budget at 12,000 hosts; loading 360 s and 3 GiB
//     at 3,000, so 20 min and 10 GiB at 10,000 in proportion; a peak of 1,000 MiB
//     over 600 and 200 MiB held before, rises of 400 and 800 MiB
//     (exponent ln 2 / ln 3 = 0.631);
//   - operator: 1, 3, 10 s at 5,000, 15,000, 50,000 nodes (exponent 1:
//     60 s at 300,000), 64·√(n/5,000) MiB (exponent 0.5: 256 MiB at
//     5,000·(256/64)² = 80,000).
//
// So detect's time is the first to break, at ~12,000 hosts.
func TestReportFitsTheExponentsExtrapolatesAndNamesTheFirstStageToBreak(t *testing.T) {
	f, err := os.Open("testdata/bench.lines")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	figs, err := readBench(f)
	if err != nil {
		t.Fatal(err)
	}
	cfg := defaultConfig()
	for _, v := range []string{"ingest=1000,3000,10000", "detect=1000,3000,10000", "operator=5000,15000,50000"} {
		if err := sizesFlag(cfg.Want).Set(v); err != nil {
			t.Fatal(err)
		}
	}
	if err := reasonsFlag(cfg.Skipped).Set("detect=10000:too long to load here"); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := report(&out, cfg, figs); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"BENCH scale.ingest_exponent 1.000 slope\n",
		"BENCH scale.ingest_peak_mib_exponent 0.000 slope\n",
		"BENCH scale.ingest_cpu_exponent 1.000 slope\n",
		"BENCH scale.detect_exponent 1.000 slope\n",
		"BENCH scale.detect_rise_mib_exponent 0.631 slope\n",
		"BENCH scale.detect_s_10000_extrapolated 25 s\n",
		"extrapolated: too long to load here; loading it would take ~20 min (3,000 hosts took 6 min here) and ~10 GiB of disk\n",
		"BENCH scale.operator_exponent 1.000 slope\n",
		"BENCH scale.operator_peak_mib_exponent 0.500 slope\n",
		"  detect   time   at ~12,000: a pass within the detector's interval (detect.every): 30 s\n",
		"  operator memory at ~80,000: the chart's memory limits for this work, 256 MiB\n",
		"  operator time   at ~300,000: ",
		"  ingest   time   at ~500,000: ",
		"  ingest   memory at no size (the cost does not grow): ",
		"First to break as the fleet grows: detect time, at ~12,000 (",
		"BENCH scale.first_break_hosts 1.2e+04 hosts\n",
		"| detect | 10,000 hosts | ~25 s (extrapolated) | ~1,000 MiB (extrapolated) | time 1.00, peak memory 0.00, memory rise 0.63 |\n",
		"| operator | 50,000 nodes | 10 s | 202 MiB | time 1.00, peak memory 0.50 |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q; it is:\n%s", want, got)
		}
	}
}

func TestReadBenchKeepsOnlyTheSizedScaleFigures(t *testing.T) {
	in := strings.NewReader("BENCH scale.ingest_s_1000 2 s\nBENCH scale.ingest_exponent 1 slope\nBENCH peers.agent_cpu_ratio 0.2 x\nBenchmarkX 1 2 ns/op\nBENCH scale.operator_peak_mib_5000 64 MiB\n")
	figs, err := readBench(in)
	if err != nil {
		t.Fatal(err)
	}
	if v := figs["ingest"]["s"][1000]; v != 2 {
		t.Errorf("ingest s at 1000 = %v, want 2", v)
	}
	if v := figs["operator"]["peak_mib"][5000]; v != 64 {
		t.Errorf("operator peak_mib at 5000 = %v, want 64", v)
	}
	if len(figs) != 2 || len(figs["ingest"]) != 1 {
		t.Errorf("figures = %v: the exponent line and other benchmarks' lines must be left out", figs)
	}
	if _, err := readBench(strings.NewReader("BENCH scale.ingest_s_1000 two s\n")); err == nil {
		t.Error("a value that is not a number was accepted")
	}
}

func TestConfigValidateNamesWhatIsWrong(t *testing.T) {
	cfg := defaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	cfg.SpansPerHostS = 0
	cfg.Want["ingets"] = []float64{1000}
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "--spans-per-host-s 0") || !strings.Contains(err.Error(), "--want ingets: no such stage") {
		t.Errorf("Validate() = %v, want both faults named", err)
	}
	if err := sizesFlag(map[string][]float64{}).Set("ingest"); err == nil {
		t.Error(`--want "ingest" without sizes was accepted`)
	}
	if err := reasonsFlag(map[string]map[float64]string{}).Set("detect=10000"); err == nil {
		t.Error(`--skipped without a reason was accepted`)
	}
}
