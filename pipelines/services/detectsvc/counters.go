package detectsvc

import (
	"context"
	"iter"
	"reflect"
	"strings"
	"time"
	"unicode"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
	"github.com/spikehunt/spikehunt/pipelines/services/ingest"
)

// A detector pass's own figures in the counters table, beside the
// ingest's (ingest/self_counters.go; docs/pipeline-health.md). The host
// column is the detect instance (--instance).
const (
	// metricDetectPassSeconds is how long the pass took (a gauge at its
	// end), by stage in the mode column: total, spikes, suspects,
	// patterns, and any stage detect.Timing gains (see passStages),
	// summed over the services of the pass.
	metricDetectPassSeconds = "spikehunt.detect.pass_seconds"
	// metricDetectSpikes counts the spike windows the pass found new or
	// changed (a delta from the end of the previous pass, or the start
	// of this one, to its end).
	metricDetectSpikes = "spikehunt.detect.spikes"
)

// PassCounters writes the figures of each pass of one detect process.
type PassCounters struct {
	w       *ingest.SelfCounters
	lastEnd time.Time // wall clock at the end of the previous pass
}

// NewPassCounters writes rows whose host is instance (the host name when
// empty).
func NewPassCounters(st store.Store, instance string) *PassCounters {
	return &PassCounters{w: ingest.NewSelfCounters(st, instance)}
}

// Record writes the figures of res, a pass that ended now. A store that
// refuses them keeps them for the next pass; the error is for a warning.
func (p *PassCounters) Record(ctx context.Context, res detect.Result, now time.Time) error {
	for stage, d := range passStages(res.Timing) {
		p.w.Gauge(metricDetectPassSeconds, "", stage, now, d.Seconds())
	}
	start := p.lastEnd
	if start.IsZero() {
		start = now.Add(-res.Timing.Total)
	}
	p.w.Delta(metricDetectSpikes, "", "", start, now, float64(res.NewSpikes()))
	p.lastEnd = now
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return p.w.Flush(ctx)
}

// passStages yields each time.Duration field of detect.Timing by its name
// in snake case (Total → total, Suspects → suspects). The detectors own
// their stages; a stage they add is charted without a change here.
func passStages(t detect.Timing) iter.Seq2[string, time.Duration] {
	return func(yield func(string, time.Duration) bool) {
		v := reflect.ValueOf(t)
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() || f.Type != reflect.TypeFor[time.Duration]() {
				continue
			}
			if !yield(snakeCase(f.Name), time.Duration(v.Field(i).Int())) {
				return
			}
		}
	}
}

// snakeCase turns a Go field name into the mode value: SuspectChunks →
// suspect_chunks.
func snakeCase(name string) string {
	var b strings.Builder
	for i, r := range name {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
