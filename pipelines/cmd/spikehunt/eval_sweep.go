package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/pipelines/lab/eval"
)

// runSweep runs eval --sweep: each cell's two fleets in databases of their
// own under dir, then the table.
func runSweep(ctx context.Context, dir string, cells []eval.SweepCell, hosts int, d time.Duration, from time.Time, seed uint64, stdout, stderr io.Writer) error {
	var out []eval.SweepResult
	for i, c := range cells {
		db := fmt.Sprintf("sweep_%d", i)
		hs, err := store.Open(ctx, "chdb://"+dir+"?database="+db+"_healthy")
		if err != nil {
			return err
		}
		ss, err := store.Open(ctx, "chdb://"+dir+"?database="+db+"_stalling")
		if err != nil {
			hs.Close()
			return err
		}
		fmt.Fprintf(stderr, "eval: sweep %d/%d: %s, %d hosts × %s, healthy and stalling\n", i+1, len(cells), c, hosts, d)
		r, err := eval.RunSweepCell(ctx, hs, ss, c, hosts, d, from, seed, eval.Options{})
		hs.Close()
		ss.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "eval: %s: %.4f false windows per host-hour, precision %.3f, recall of the visible %.3f (ceiling %.3f)\n",
			c, r.FalsePerHostHour(), r.Stalling.Precision(), r.RecallOfCeiling(), r.Ceiling())
		out = append(out, r)
	}
	printSweep(stdout, out)
	return nil
}

// printSweep is the sweep's table, as docs/detection.md keeps it.
func printSweep(w io.Writer, rs []eval.SweepResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "body\trate (req/s)\tfalse /host-hour\tstalls\tvisible\tfound\trecall of visible\tprecision\tload\tdetect")
	for _, r := range rs {
		body := fmt.Sprintf("σ %g", r.Cell.Sigma)
		if r.Cell.Bimodal {
			body += ", 10% misses ×20"
		}
		fmt.Fprintf(tw, "%s\t%g\t%.4f\t%d\t%d\t%d\t%.3f\t%.3f\t%s\t%s\n", body, r.Cell.RPS, r.FalsePerHostHour(),
			r.Stalling.Truth, r.Visible, r.FoundVisible, r.RecallOfCeiling(), r.Stalling.Precision(),
			r.Load.Round(time.Second), r.Detect.Round(time.Second))
	}
	tw.Flush()
}

func floatList(fs []float64) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = strconv.FormatFloat(f, 'g', -1, 64)
	}
	return strings.Join(s, ",")
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("no value")
	}
	return out, nil
}
