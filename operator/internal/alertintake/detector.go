package alertintake

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/alertdoc"
	"github.com/spikehunt/spikehunt/internal/vocab"
)

// The operator reads the detector's alert document as internal/alertdoc
// declares it, one definition for both sides; it knows one version,
// alertdoc.SchemaVersion (internal/alertdoc/schema.md). Within it fields
// may be added, so unknown fields are ignored; anything a v1 reader would
// misread is a new version, which is refused.

// Reasons a Kafka record is rejected (the records_rejected metric).
const (
	rejectBadJSON       = "bad_json"
	rejectUnknownSchema = "unknown_schema"
	rejectInvalid       = "invalid"
	// rejectRecordTooLarge: a value over KafkaConfig.MaxRecordBytes.
	rejectRecordTooLarge = "too_large"
)

// decodeError is a refused document and the reason it is counted under.
type decodeError struct {
	reason string
	err    error
}

func (e *decodeError) Error() string { return e.err.Error() }
func (e *decodeError) Unwrap() error { return e.err }

func refuse(reason, format string, args ...any) error {
	return &decodeError{reason: reason, err: fmt.Errorf("intake: "+format, args...)}
}

// reasonOf is the metric reason of a decode error.
func reasonOf(err error) string {
	var de *decodeError
	if errors.As(err, &de) {
		return de.reason
	}
	return rejectInvalid
}

// modifierHWClassSkewed is the pattern modifier that says the spike rate
// differs materially by hardware class (docs/design.md §5).
const modifierHWClassSkewed = vocab.ModifierHWClassSkewed

var alertIDPattern = regexp.MustCompile(`^(spikegroup|pattern)-[0-9a-f]{32}$`)

// decodeDetectorAlert decodes one spikehunt.alert/v1 document, as found in
// a record of the alerts topic. A document it refuses returns a
// *decodeError whose reason is bad_json, unknown_schema or invalid. A valid
// document that alerts nothing the operator acts on (a resolved pattern)
// returns a skip reason and no Alert. data is not retained.
func decodeDetectorAlert(data []byte, received time.Time) (Alert, string, error) {
	var d alertdoc.Alert
	if err := json.Unmarshal(data, &d); err != nil {
		return Alert{}, "", refuse(rejectBadJSON, "alert document: %v", err)
	}
	if d.Schema != alertdoc.SchemaVersion {
		return Alert{}, "", refuse(rejectUnknownSchema, "alert document of schema %.64q; this operator reads %s", d.Schema, alertdoc.SchemaVersion)
	}
	if !alertIDPattern.MatchString(d.AlertID) {
		return Alert{}, "", refuse(rejectInvalid, "alert_id %.80q is not spikegroup-<32 hex> or pattern-<32 hex>", d.AlertID)
	}
	service, ok := cleanValue(d.Service)
	if !ok || service == "" {
		return Alert{}, "", refuse(rejectInvalid, "alert %s: service %.80q is empty or not printable", d.AlertID, d.Service)
	}
	a := Alert{Source: SourceKafka, Key: string(SourceKafka) + "/" + d.AlertID, Service: service, ReceivedAt: received, RawID: d.AlertID}
	switch {
	case d.Kind == "spike-group" && d.SpikeGroup != nil && d.Pattern == nil && strings.HasPrefix(d.AlertID, "spikegroup-"):
		g := d.SpikeGroup
		if a.Hosts, ok = cleanList(g.Hosts); !ok {
			return Alert{}, "", refuse(rejectInvalid, "alert %s: a host name is not printable", d.AlertID)
		}
		counts := make(map[string]float64, len(g.HWClasses))
		for c, n := range g.HWClasses {
			counts[c] = float64(n)
		}
		if a.HWClasses, ok = byWeight(counts); !ok {
			return Alert{}, "", refuse(rejectInvalid, "alert %s: a hardware class is not printable", d.AlertID)
		}
		a.WindowStart, a.WindowEnd = g.FirstWindowStart, g.LastWindowEnd
	case d.Kind == "pattern" && d.Pattern != nil && d.SpikeGroup == nil && strings.HasPrefix(d.AlertID, "pattern-"):
		p := d.Pattern
		switch p.Change {
		case "new", "changed":
		case "resolved":
			return Alert{}, skipResolved, nil
		default:
			return Alert{}, "", refuse(rejectInvalid, "alert %s: pattern change %.32q, want new, changed or resolved", d.AlertID, p.Change)
		}
		if a.PatternClass, ok = cleanClass(p.Class); !ok || a.PatternClass == "" {
			return Alert{}, "", refuse(rejectInvalid, "alert %s: pattern class %.80q is not a class name", d.AlertID, p.Class)
		}
		if a.Hosts, ok = cleanList(p.AffectedHostsSample); !ok {
			return Alert{}, "", refuse(rejectInvalid, "alert %s: a host name is not printable", d.AlertID)
		}
		if a.PatternKey, ok = cleanValue(p.PatternID); !ok || a.PatternKey == "" {
			return Alert{}, "", refuse(rejectInvalid, "alert %s: pattern_id %.80q is empty or not printable", d.AlertID, p.PatternID)
		}
		// A pattern singles out hardware classes only when the detector
		// found its spike rate skewed by class: then the classes that spike
		// more often than the fleet. Otherwise it concerns every class.
		if slices.Contains(p.Modifiers, modifierHWClassSkewed) {
			skewed := map[string]float64{}
			for c, v := range p.HWClassSkew {
				if v > 1 {
					skewed[c] = v
				}
			}
			if a.HWClasses, ok = byWeight(skewed); !ok {
				return Alert{}, "", refuse(rejectInvalid, "alert %s: a hardware class is not printable", d.AlertID)
			}
		}
		a.WindowStart, a.WindowEnd = p.LookbackStart, p.LookbackEnd
	default:
		return Alert{}, "", refuse(rejectInvalid, "alert %s: kind %.32q does not match its id or body", d.AlertID, d.Kind)
	}
	if !a.WindowStart.IsZero() && !a.WindowEnd.IsZero() && a.WindowEnd.Before(a.WindowStart) {
		return Alert{}, "", refuse(rejectInvalid, "alert %s: window ends (%s) before it starts (%s)", d.AlertID,
			a.WindowEnd.Format(time.RFC3339), a.WindowStart.Format(time.RFC3339))
	}
	return a, "", nil
}

// byWeight lists the names with a positive weight, heaviest first, then by
// name; nil when there are none.
func byWeight(w map[string]float64) ([]string, bool) {
	type named struct {
		name   string
		weight float64
	}
	var list []named
	for n, v := range w {
		c, ok := cleanValue(n)
		if !ok {
			return nil, false
		}
		if c != "" && v > 0 {
			list = append(list, named{c, v})
		}
	}
	slices.SortFunc(list, func(a, b named) int {
		switch {
		case a.weight > b.weight:
			return -1
		case a.weight < b.weight:
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	var out []string
	for _, e := range list {
		if !slices.Contains(out, e.name) { // " a" and "a" clean to the same name
			out = append(out, e.name)
		}
	}
	return out, true
}
