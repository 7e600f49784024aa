package detectsvc

import (
	"fmt"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/pipelines/services/detect"
)

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// Summary is one line per pass: the range, what was written, the patterns,
// and where the time went.
func Summary(r detect.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s → %s: %d service(s), %d spike windows (%d new or changed, %d retracted), %d suspect rows, ",
		stamp(r.From), stamp(r.To), len(r.Services), len(r.Spikes), r.NewSpikes(), len(r.Retracted), r.SuspectRows)
	switch {
	case r.PatternsSkipped:
		fmt.Fprintf(&b, "catching up, %s behind (patterns at its end)", r.Behind.Round(time.Second))
	case len(r.Patterns) == 0:
		b.WriteString("no pattern")
	default:
		var ps []string
		for _, p := range r.Patterns {
			s := fmt.Sprintf("%s %s", p.Service, p.Class)
			for _, m := range p.Modifiers {
				s += "+" + m
			}
			s += fmt.Sprintf(" %d/%d hosts", p.HostsAffected, p.HostsTotal)
			if p.RecurrenceInterval > 0 {
				s += " every " + p.RecurrenceInterval.String()
			}
			ps = append(ps, s)
		}
		fmt.Fprintf(&b, "%d pattern(s) [%s]", len(r.Patterns), strings.Join(ps, "; "))
	}
	if len(r.RetractedPatterns) > 0 {
		fmt.Fprintf(&b, ", %d pattern(s) retracted", len(r.RetractedPatterns))
	}
	if r.EndpointsDropped > 0 {
		fmt.Fprintf(&b, ", %d endpoint(s) beyond --max-endpoints not judged on their own", r.EndpointsDropped)
	}
	t := r.Timing
	fmt.Fprintf(&b, "; pass %v (spikes %v, suspects %v, patterns %v)", t.Total.Round(time.Millisecond),
		t.Spikes.Round(time.Millisecond), t.Suspects.Round(time.Millisecond), t.Patterns.Round(time.Millisecond))
	return b.String()
}
