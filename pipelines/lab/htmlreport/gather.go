// Package htmlreport renders the demo's finding as one self-contained HTML
// file: the fleet-averaged latency (which looks like a uniform regression),
// per-host latency as a host × minute heatmap (which shows each host's own
// rare spikes), and the spike raster (host × time), each with a UTC time
// axis, host classes and a colour scale in milliseconds. The plots are
// inline SVG drawn at the size they are shown (svg.go says why they are
// written here rather than with a plotting library): the file opens
// offline, with nothing to fetch.
package htmlreport

import (
	"context"
	"fmt"
	"html/template"
	"sort"
	"strconv"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
)

// Fleet is what the report shows of one service over [From, To).
type Fleet struct {
	Service  string
	From, To time.Time
	// Averaged: one point per minute over the whole fleet.
	Minutes []time.Time
	MeanMS  []float64 // weighted mean latency
	P99MS   []float64 // weighted p99 of the fleet's requests
	// PerHost: max latency per host and minute, hosts sorted by name.
	Hosts   []string
	HWClass []string    // per host
	HostMax [][]float64 // [host][minute] ms; 0 = no data
	Spikes  []Spike
	// Steps are the finding, in the order it is told; each is a heading,
	// its paragraphs, and the plots that show it. Plots no step names
	// follow the steps.
	Steps []Step
}

// Step is one step of the finding.
type Step struct {
	Title      string
	Paragraphs []Paragraph
	Figures    []Figure
	// Drawings are plots the step brings along, drawn by the caller.
	Drawings []Drawing
}

// Drawing is a plot made elsewhere (a capture's thread timeline or flame
// graph, pipelines/cli/artifacts): SVG markup the caller drew itself, at
// the width it is shown (at most 900 px), and its caption.
type Drawing struct {
	ID      string
	SVG     template.HTML
	Caption string
}

// Paragraph is whole: a sentence that a console wraps over several lines
// is one Text here. Items are a list that follows it (lines the console
// indents under it).
type Paragraph struct {
	Text  string
	Items []string
}

// Figure names one of the report's plots.
type Figure int

const (
	// FigureAveraged is the fleet's per-minute mean and p99 latency.
	FigureAveraged Figure = iota
	// FigureHeatmap is each host's slowest request per minute.
	FigureHeatmap
	// FigureRaster is each host's spike windows.
	FigureRaster
)

// Spike is one spike window for the raster.
type Spike struct {
	Host       string
	Start, End time.Time
	PeakMS     float64
}

// Gather reads the report's data from latency_1s and spikes.
func Gather(ctx context.Context, st store.Store, service string, from, to time.Time) (*Fleet, error) {
	f := &Fleet{Service: service, From: from.UTC().Truncate(time.Minute), To: to.UTC()}
	where := fmt.Sprintf("service = %s AND ts >= toDateTime(%d, 'UTC') AND ts < toDateTime(%d, 'UTC')",
		store.QuoteString(service), f.From.Unix(), f.To.Unix())
	minute := func(s string) (int, error) {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, err
		}
		return int((v - f.From.Unix()) / 60), nil
	}
	n := int(f.To.Sub(f.From)/time.Minute) + 1
	f.Minutes = make([]time.Time, n)
	for i := range f.Minutes {
		f.Minutes[i] = f.From.Add(time.Duration(i) * time.Minute)
	}
	f.MeanMS, f.P99MS = make([]float64, n), make([]float64, n)
	avg, err := store.Select(ctx, st, `SELECT toUnixTimestamp(toStartOfMinute(ts)) AS m,
		sum(weighted_sum_us) / sum(weighted_count) / 1000,
		quantilesTDigestWeightedMerge(0.5, 0.9, 0.99, 0.999)(quantiles_us)[3] / 1000
		FROM latency_1s WHERE `+where+` GROUP BY m ORDER BY m`)
	if err != nil {
		return nil, fmt.Errorf("report: averaged latency: %w", err)
	}
	for _, r := range avg.Rows {
		i, err := minute(r[0])
		if err != nil || i < 0 || i >= n {
			continue
		}
		f.MeanMS[i], _ = strconv.ParseFloat(r[1], 64)
		f.P99MS[i], _ = strconv.ParseFloat(r[2], 64)
	}
	per, err := store.Select(ctx, st, `SELECT host, any(hw_class), toUnixTimestamp(toStartOfMinute(ts)) AS m, max(max_us) / 1000
		FROM latency_1s WHERE `+where+` GROUP BY host, m ORDER BY host, m`)
	if err != nil {
		return nil, fmt.Errorf("report: per-host latency: %w", err)
	}
	index := map[string]int{}
	for _, r := range per.Rows {
		h, ok := index[r[0]]
		if !ok {
			h = len(f.Hosts)
			index[r[0]] = h
			f.Hosts = append(f.Hosts, r[0])
			f.HWClass = append(f.HWClass, r[1])
			f.HostMax = append(f.HostMax, make([]float64, n))
		}
		if i, err := minute(r[2]); err == nil && i >= 0 && i < n {
			f.HostMax[h][i], _ = strconv.ParseFloat(r[3], 64)
		}
	}
	sp, err := store.Select(ctx, st, fmt.Sprintf(`SELECT host, toUnixTimestamp64Milli(window_start), toUnixTimestamp64Milli(window_end), peak_us / 1000
		FROM spikes FINAL WHERE service = %s AND is_deleted = 0 AND window_start >= fromUnixTimestamp64Milli(%d) AND window_start < fromUnixTimestamp64Milli(%d)
		ORDER BY host, window_start`, store.QuoteString(service), f.From.UnixMilli(), f.To.UnixMilli()))
	if err != nil {
		return nil, fmt.Errorf("report: spikes: %w", err)
	}
	for _, r := range sp.Rows {
		a, _ := strconv.ParseInt(r[1], 10, 64)
		b, _ := strconv.ParseInt(r[2], 10, 64)
		pk, _ := strconv.ParseFloat(r[3], 64)
		f.Spikes = append(f.Spikes, Spike{Host: r[0], Start: time.UnixMilli(a).UTC(), End: time.UnixMilli(b).UTC(), PeakMS: pk})
	}
	sort.SliceStable(f.Spikes, func(i, j int) bool { return f.Spikes[i].Start.Before(f.Spikes[j].Start) })
	return f, nil
}
