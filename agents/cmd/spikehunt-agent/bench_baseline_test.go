package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// baselineAgent builds the agent of the commit SPIKEHUNT_BENCH_BASELINE_REF
// names, from that commit's tree (git archive) with this module cache, and
// returns the binary; "" when the variable is not set. It fails b when the
// build does.
func baselineAgent(b *testing.B) string {
	ref := os.Getenv("SPIKEHUNT_BENCH_BASELINE_REF")
	if ref == "" {
		return ""
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		b.Fatalf("baseline %s: not in a git checkout: %v", ref, err)
	}
	dir := b.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		b.Fatal(err)
	}
	extract := exec.Command("sh", "-c", `git archive "$1" | tar -x -C "$2"`, "sh", ref, src)
	extract.Dir = strings.TrimSpace(string(top))
	if out, err := extract.CombinedOutput(); err != nil {
		b.Fatalf("baseline %s: git archive: %v\n%s", ref, err, out)
	}
	bin := filepath.Join(dir, "spikehunt-agent")
	build := exec.Command("go", "build", "-o", bin, "./agents/cmd/spikehunt-agent")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("baseline %s: go build: %v\n%s", ref, err, out)
	}
	b.Logf("baseline agent: %s", ref)
	return bin
}

// measureAlternately runs measure on the baseline binary and on this
// tree's agent, SPIKEHUNT_BENCH_ROUNDS times each (default 3), swapping
// which goes first each round so that a drift in the machine's load
// weighs on both alike, and returns the median figures of each (each
// figure's median taken apart, the CPU per 10,000 requests/s too). Each
// run's figures are logged.
func measureAlternately(b *testing.B, baseline string, measure func(bin, profile string) (agentFigures, error)) (base, cur agentFigures, err error) {
	rounds := 3
	if v, err := strconv.Atoi(os.Getenv("SPIKEHUNT_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	var bases, curs []agentFigures
	for i := range rounds {
		order := []string{baseline, agentBin}
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, bin := range order {
			r, err := measure(bin, "")
			if err != nil {
				return base, cur, err
			}
			name := "this tree"
			if bin == baseline {
				name, bases = "baseline", append(bases, r)
			} else {
				curs = append(curs, r)
			}
			b.Logf("round %d, %s: CPU %.3f%% of a core, RSS %.1f MiB, %.0f requests/s", i+1, name, r.cpuPct, r.rssMiB, r.rate)
		}
	}
	return medianFigures(bases), medianFigures(curs), nil
}

// medianFigures takes the median of each figure over runs on its own.
func medianFigures(runs []agentFigures) agentFigures {
	median := func(f func(agentFigures) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return agentFigures{
		cpuPct:   median(func(r agentFigures) float64 { return r.cpuPct }),
		sysPct:   median(func(r agentFigures) float64 { return r.sysPct }),
		switches: median(func(r agentFigures) float64 { return r.switches }),
		rssMiB:   median(func(r agentFigures) float64 { return r.rssMiB }),
		rate:     median(func(r agentFigures) float64 { return r.rate }),
		cgroups:  median(func(r agentFigures) float64 { return r.cgroups }),
		cpuPer10k: median(func(r agentFigures) float64 {
			if r.rate == 0 {
				return 0
			}
			return r.cpuPct / r.rate * 10000
		}),
	}
}
