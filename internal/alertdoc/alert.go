package alertdoc

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// SchemaVersion names the document format. A change that a v1 reader would
// misread (a renamed or retyped field, a new meaning) is a new version;
// adding optional fields is not.
const SchemaVersion = "spikehunt.alert/v1"

// Alert kinds.
const (
	KindSpikeGroup = "spike-group" // new spike windows of a service in one detector pass
	KindPattern    = "pattern"     // a fleet pattern appeared, changed or resolved
)

// Pattern changes.
const (
	ChangeNew      = "new"
	ChangeChanged  = "changed"
	ChangeResolved = "resolved"
)

// What a "changed" pattern alert says moved (PatternChange.Changes).
const (
	ChangedClass              = "class"
	ChangedModifiers          = "modifiers"
	ChangedHostsAffected      = "hosts_affected"
	ChangedRecurrenceInterval = "recurrence_interval"
)

// JSONSchema is alert.schema.json, the JSON Schema of an Alert document, for
// consumers that validate what they read.
//
//go:embed alert.schema.json
var JSONSchema []byte

// Alert is one message on the alerts topic. Exactly one of SpikeGroup and
// Pattern is set, as Kind says. The JSON field names are the schema: add
// fields, never rename them.
type Alert struct {
	Schema string `json:"schema"` // SchemaVersion
	// AlertID is a hash of what defines the alert (kind, service, the spike
	// windows or the pattern's new state), not of when it was made: a
	// re-send carries the same id.
	AlertID         string         `json:"alert_id"`
	Kind            string         `json:"kind"`
	Service         string         `json:"service"` // also the Kafka record key
	DetectorVersion string         `json:"detector_version"`
	GeneratedAt     time.Time      `json:"generated_at"`
	SpikeGroup      *SpikeGroup    `json:"spike_group,omitempty"`
	Pattern         *PatternChange `json:"pattern,omitempty"`
}

// SpikeGroup is the new spike windows of one service found in one detector
// pass, plus any that the rate limit held back before.
type SpikeGroup struct {
	Count int `json:"count"` // spike windows in this alert, folded ones included
	// SuppressedAlerts is how many earlier spike-group alerts of the service
	// the rate limit held back; their windows are in this one.
	SuppressedAlerts int            `json:"suppressed_alerts"`
	HostsCount       int            `json:"hosts_count"`
	Hosts            []string       `json:"hosts"`      // most windows first, at most Config.MaxHosts
	HWClasses        map[string]int `json:"hw_classes"` // spike windows per hardware class
	FirstWindowStart time.Time      `json:"first_window_start"`
	LastWindowEnd    time.Time      `json:"last_window_end"`
	PeakMS           float64        `json:"peak_ms"`
	PeakHost         string         `json:"peak_host"`
	SpikeIDs         []string       `json:"spike_ids"` // sorted; the spikes table's spike_id
	TopSuspects      []GroupSuspect `json:"top_suspects"`
}

// GroupSuspect is a counter family (metric, mode, device) among the
// suspects of a group's spike windows.
type GroupSuspect struct {
	Metric       string `json:"metric"`
	Mode         string `json:"mode"`
	Device       string `json:"device"`
	CPUs         []int  `json:"cpus"`          // most frequent first; empty when not per CPU
	Rank1Windows int    `json:"rank1_windows"` // windows where it was the top suspect
	Windows      int    `json:"windows"`       // windows where it was a suspect at all
	Hosts        int    `json:"hosts"`
}

// PatternFacts is a fleet pattern's state as an alert reports it, and what
// the Publisher remembers of the last one it published.
type PatternFacts struct {
	PatternID           string             `json:"pattern_id"`
	Class               string             `json:"class"`
	Modifiers           []string           `json:"modifiers"` // sorted
	HostsAffected       int                `json:"hosts_affected"`
	HostsTotal          int                `json:"hosts_total"`
	HostsAffectedShare  float64            `json:"hosts_affected_share"`
	RecurrenceIntervalS float64            `json:"recurrence_interval_s"`
	Regularity          float64            `json:"regularity"`
	Synchronicity       float64            `json:"synchronicity"`
	HWClassSkew         map[string]float64 `json:"hw_class_skew"`
	IllusionShare       float64            `json:"illusion_share"`
	Suspects            []PatternSuspect   `json:"suspects"`
	AffectedHostsSample []string           `json:"affected_hosts_sample"`
	LookbackStart       time.Time          `json:"lookback_start"`
	LookbackEnd         time.Time          `json:"lookback_end"`
}

// PatternSuspect is a counter family that moved during the spikes of many
// affected hosts.
type PatternSuspect struct {
	Metric string  `json:"metric"`
	Mode   string  `json:"mode"`
	Device string  `json:"device"`
	CPUs   []int   `json:"cpus"`
	Hosts  int     `json:"hosts"`
	Score  float64 `json:"score"`
}

// PatternChange is a pattern alert: the pattern's current facts (for
// "resolved", the last published ones), what changed, and the previously
// published facts for "changed" and "resolved".
type PatternChange struct {
	Change  string   `json:"change"`
	Changes []string `json:"changes"` // for "changed": what moved materially; else empty
	PatternFacts
	Previous *PatternFacts `json:"previous,omitempty"`
}

// ErrUnknownSchema is returned by Parse for a document of another schema.
var ErrUnknownSchema = errors.New("alertdoc: unknown alert schema")

// Parse decodes one alert document and checks its schema version and kind.
func Parse(data []byte) (Alert, error) {
	var a Alert
	if err := json.Unmarshal(data, &a); err != nil {
		return Alert{}, fmt.Errorf("alertdoc: decode: %w", err)
	}
	if a.Schema != SchemaVersion {
		return Alert{}, fmt.Errorf("%w %q (this reader knows %s)", ErrUnknownSchema, a.Schema, SchemaVersion)
	}
	switch {
	case a.Kind == KindSpikeGroup && a.SpikeGroup != nil && a.Pattern == nil:
	case a.Kind == KindPattern && a.Pattern != nil && a.SpikeGroup == nil:
	default:
		return Alert{}, fmt.Errorf("alertdoc: alert %s: kind %q does not match its body", a.AlertID, a.Kind)
	}
	return a, nil
}

// alertID hashes the parts that define an alert: sha256 of their JSON,
// 32 hex digits, prefixed with the kind so that ids are readable in logs.
func alertID(kind string, parts ...any) string {
	b, err := json.Marshal(append([]any{SchemaVersion, kind}, parts...))
	if err != nil {
		panic(fmt.Sprintf("alertdoc: id of %v: %v", parts, err)) // only plain values are hashed
	}
	sum := sha256.Sum256(b)
	return strings.ReplaceAll(kind, "-", "") + "-" + hex.EncodeToString(sum[:16])
}

// SpikeGroupID: the service and its spike windows. The same windows sent
// again have the same id, whatever pass they came in.
func SpikeGroupID(service string, sortedIDs []string) string {
	return alertID(KindSpikeGroup, service, sortedIDs)
}

// PatternAlertID: the pattern, the change and the state it changed to.
// Look-back and generation times are left out so that the same decision
// made again after a restart is recognizably the same alert.
func PatternAlertID(service, change string, f PatternFacts) string {
	return alertID(KindPattern, service, f.PatternID, change, f.Class, f.Modifiers, f.HostsAffected, f.HostsTotal,
		int64(f.RecurrenceIntervalS+0.5))
}
