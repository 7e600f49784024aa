package alerts

import (
	"maps"
	"slices"
	"time"

	"github.com/spikehunt/spikehunt/internal/alertdoc"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
)

// State is what the Publisher remembers between passes: everything a
// restart needs not to re-send and not to lose. It is plain JSON; persist
// it after each Publish and Restore it in the next process.
type State struct {
	// Patterns is the last published state of each live pattern, by
	// pattern id. Changes are measured against it, not against the last
	// pass, so a slow drift adds up until it is material.
	Patterns map[string]PatternRecord `json:"patterns"`
	// SentSpikes holds the published spike windows (id → window start)
	// for Config.DedupHorizon.
	SentSpikes map[string]time.Time `json:"sent_spikes"`
	// Pending holds spike windows the rate limit held back, per service,
	// and HeldBack how many alerts they would have been.
	Pending  map[string][]detect.SpikeWindow `json:"pending"`
	HeldBack map[string]int                  `json:"held_back"`
	// Buckets are the per-service token buckets of the rate limit.
	Buckets map[string]Bucket `json:"buckets"`
	// Outbox holds decided alerts the sink has not accepted yet. Decide
	// leaves it alone; Publisher sends it.
	Outbox []alertdoc.Alert `json:"outbox"`
}

// PatternRecord is a published pattern.
type PatternRecord struct {
	Service         string                `json:"service"`
	DetectorVersion string                `json:"detector_version"`
	Facts           alertdoc.PatternFacts `json:"facts"`
	// MissingSince is when the pattern first went missing from the passes
	// (zero while present); see Config.ResolveAfter.
	MissingSince time.Time `json:"missing_since"`
	// SentAt is when its last new or changed alert was decided (zero in a
	// state rebuilt from the tables); see Config.PatternChangeEvery.
	SentAt time.Time `json:"sent_at"`
}

// Bucket is a token bucket: Tokens as of At.
type Bucket struct {
	Tokens float64   `json:"tokens"`
	At     time.Time `json:"at"`
}

// clone deep-copies what Decide mutates, so that a Decision never aliases
// the State it came from.
func (s State) clone() State {
	c := State{
		Patterns:   maps.Clone(s.Patterns),
		SentSpikes: maps.Clone(s.SentSpikes),
		Pending:    make(map[string][]detect.SpikeWindow, len(s.Pending)),
		HeldBack:   maps.Clone(s.HeldBack),
		Buckets:    maps.Clone(s.Buckets),
		Outbox:     slices.Clone(s.Outbox),
	}
	for svc, w := range s.Pending {
		c.Pending[svc] = slices.Clone(w)
	}
	if c.Patterns == nil {
		c.Patterns = map[string]PatternRecord{}
	}
	if c.SentSpikes == nil {
		c.SentSpikes = map[string]time.Time{}
	}
	if c.HeldBack == nil {
		c.HeldBack = map[string]int{}
	}
	if c.Buckets == nil {
		c.Buckets = map[string]Bucket{}
	}
	return c
}
