package htmlreport

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// syntheticFleet is the demo's shape without the engine: hosts in two
// classes whose slowest request per minute is a few tens of ms, each host
// stalling for ~1 s every 8 (gen5) or 18 (gen4) minutes at its own phase.
func syntheticFleet(hosts int, span time.Duration) *Fleet {
	rng := rand.New(rand.NewPCG(1, 2))
	from := time.Date(2026, 11, 26, 5, 0, 0, 0, time.UTC) // fixed date: a page rendered in memory, never stored
	f := &Fleet{Service: "checkout", From: from, To: from.Add(span)}
	n := int(span/time.Minute) + 1
	for m := 0; m < n; m++ {
		f.Minutes = append(f.Minutes, from.Add(time.Duration(m)*time.Minute))
		if m < n-1 {
			f.MeanMS, f.P99MS = append(f.MeanMS, 5.7+0.3*rng.Float64()), append(f.P99MS, 20+2*rng.Float64())
		} else {
			f.MeanMS, f.P99MS = append(f.MeanMS, 0), append(f.P99MS, 0)
		}
	}
	for h := 0; h < hosts; h++ {
		name := fmt.Sprintf("node-%04d", h)
		class, every := "gen4", 18
		if h%2 == 1 {
			class, every = "gen5", 8
		}
		f.Hosts, f.HWClass = append(f.Hosts, name), append(f.HWClass, class)
		row := make([]float64, n)
		for m := 0; m < n-1; m++ {
			row[m] = 12 * math.Exp(0.5*rng.NormFloat64())
		}
		for m := rng.IntN(every); m < n-1; m += every {
			peak := 600 + 400*rng.Float64()
			row[m] = peak
			at := from.Add(time.Duration(m)*time.Minute + time.Duration(rng.IntN(59))*time.Second)
			f.Spikes = append(f.Spikes, Spike{Host: name, Start: at, End: at.Add(time.Second), PeakMS: peak})
		}
		f.HostMax = append(f.HostMax, row)
	}
	return f
}

// BenchmarkWrite renders the report of the demo's fleet (300 hosts) over
// 3 and 6 hours and reports the page's size.
func BenchmarkWrite(b *testing.B) {
	for _, hours := range []int{3, 6} {
		f := syntheticFleet(300, time.Duration(hours)*time.Hour)
		b.Run(fmt.Sprintf("hosts=300/hours=%d", hours), func(b *testing.B) {
			var size countingWriter
			b.ReportAllocs()
			for b.Loop() {
				size = 0
				if err := Write(&size, f); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(size), "page-bytes")
		})
	}
}

type countingWriter int

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}

var _ io.Writer = (*countingWriter)(nil)
