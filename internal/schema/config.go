package schema

import (
	"fmt"
	"regexp"

	"github.com/spikehunt/spikehunt/internal/defaults"
)

// Options selects how the migrations are rendered. The zero value is a
// single server with the default retention.
type Options struct {
	// Database holds every table, including schema_migrations. Apply
	// defaults it to the store's current database; Render leaves names
	// unqualified when it is empty (single server only).
	Database string
	// Cluster is the cluster name from the servers' remote_servers config.
	// Empty renders single-server DDL. Do not set it for a lone server:
	// Replicated tables need ClickHouse Keeper and the {shard}/{replica}
	// macros on every server.
	Cluster string

	// Retention in days, 1–3650. requests is the bulkiest table and only
	// feeds drill-downs; latency_1s is its per-second rollup and must
	// outlive it so detectors can look back further than raw data goes.
	RequestsTTLDays   int // default 7
	LatencyTTLDays    int // default 90; at least RequestsTTLDays
	CountersTTLDays   int // default 14
	DetectionsTTLDays int // spikes, spike_suspects, patterns; default 365
	CapturesTTLDays   int // the captures index; default 365

	// DedupWindow is how many recent insert blocks (per table) ClickHouse
	// remembers to drop retried ones, 1–100000. Default 20000: the ingest
	// checks at start that it covers every block that may go into a table
	// between a batch's first insert and its last retry (see
	// pipelines/services/ingest/dedup.go), about 620 per Kafka partition at its
	// default batch delay (1 s) and session timeout (45 s); 20000 covers
	// 32 partitions.
	DedupWindow int
}

// Defaults, exported so the CLI and the Helm chart document the same values.
const (
	DefaultRequestsTTLDays   = 7
	DefaultLatencyTTLDays    = 90
	DefaultCountersTTLDays   = 14
	DefaultDetectionsTTLDays = 365
	DefaultCapturesTTLDays   = 365
	DefaultDedupWindow       = 20000

	maxTTLDays     = 3650
	maxDedupWindow = 100000
)

var (
	databaseName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	clusterName  = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
)

// WithDefaults returns o with zero retentions and DedupWindow set to their
// defaults; o itself is not changed (Database is Apply's to default, from
// the store).
func (o Options) WithDefaults() Options {
	defaults.Fill(&o.RequestsTTLDays, DefaultRequestsTTLDays)
	defaults.Fill(&o.LatencyTTLDays, DefaultLatencyTTLDays)
	defaults.Fill(&o.CountersTTLDays, DefaultCountersTTLDays)
	defaults.Fill(&o.DetectionsTTLDays, DefaultDetectionsTTLDays)
	defaults.Fill(&o.CapturesTTLDays, DefaultCapturesTTLDays)
	defaults.Fill(&o.DedupWindow, DefaultDedupWindow)
	return o
}

// Validate checks o as Render and Apply would use it, its zero fields
// taken as their defaults. It does not change o.
func (o Options) Validate() error {
	if o.Database != "" && !databaseName.MatchString(o.Database) {
		return fmt.Errorf("schema: database name %q: use letters, digits and _", o.Database)
	}
	if o.Cluster != "" {
		if !clusterName.MatchString(o.Cluster) {
			return fmt.Errorf("schema: cluster name %q: use letters, digits, _, - and .", o.Cluster)
		}
		if o.Database == "" {
			return fmt.Errorf("schema: cluster %s: set Options.Database, Distributed tables name it explicitly", o.Cluster)
		}
	}
	o = o.WithDefaults()
	ttls := []struct {
		name string
		days int
	}{
		{"RequestsTTLDays", o.RequestsTTLDays},
		{"LatencyTTLDays", o.LatencyTTLDays},
		{"CountersTTLDays", o.CountersTTLDays},
		{"DetectionsTTLDays", o.DetectionsTTLDays},
		{"CapturesTTLDays", o.CapturesTTLDays},
	}
	for _, t := range ttls {
		if t.days < 1 || t.days > maxTTLDays {
			return fmt.Errorf("schema: %s = %d, want 1–%d", t.name, t.days, maxTTLDays)
		}
	}
	if o.LatencyTTLDays < o.RequestsTTLDays {
		return fmt.Errorf("schema: LatencyTTLDays (%d) < RequestsTTLDays (%d): the per-second rollup would expire before the requests it summarizes", o.LatencyTTLDays, o.RequestsTTLDays)
	}
	if o.DedupWindow < 1 || o.DedupWindow > maxDedupWindow {
		return fmt.Errorf("schema: DedupWindow = %d, want 1–%d", o.DedupWindow, maxDedupWindow)
	}
	return nil
}
