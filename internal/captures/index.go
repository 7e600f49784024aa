// Package captures is the captures index in ClickHouse, in one place for
// every writer and reader: one captures row per uploaded capture, linked to
// every spike window it overlaps on its host (docs/design.md §6), and the
// lookups in both directions. The operator's capture controller calls Index
// when a Capture reaches Uploaded and Delete from its retention finalizer;
// `spikehunt demo` calls Index for the capture it takes on its own host;
// `spikehunt spikes --without-captures` and `spikehunt captures --spike`
// select with WithoutCaptures and ListsSpike. The functions take plain
// values so that they depend on no CRD type and no agent package.
//
// Semantics, decided here:
//
//   - Which spikes: every live spike (spikes FINAL, is_deleted = 0) on the
//     capture's host, of any service. A flight recorder sees the whole host,
//     so a capture fired for one service also holds another service's stall
//     at the same moment, and the captures table has no service column.
//     Windows that began more than a day (SpikeLookBack) before the
//     capture's are not looked for.
//   - Overlap: both windows are half-open. A spike's window_end is the end
//     of its last slow second (the detector writes last second + 1 s), and a
//     capture covers [fire − pre, fire + post). They overlap when
//     spike.window_start < capture.window_end and spike.window_end >
//     capture.window_start: windows that only touch share no instant and are
//     not linked.
//   - Idempotence: captures is a ReplacingMergeTree keyed by (host,
//     window_start, capture_id) with version updated_at. Index writes the
//     whole row again with a newer updated_at and the first write's
//     created_at, so re-indexing leaves one row, with the spike ids of that
//     moment. A capture's host and window_start are fixed when it fires; Index
//     refuses to change them (ErrKeyChanged) rather than leave two rows.
//   - Late spikes: the detector runs on an interval and may write a spike
//     after its capture was indexed. Index is cheap and safe to repeat: call
//     it again (say, once the detector's next pass is due) while it returns
//     no ids, or whenever a pass may have changed the host's windows.
//   - Deletion: captures has no is_deleted column, so Delete removes the
//     rows with a lightweight DELETE; every lookup, and `spikehunt spikes
//     --without-captures`, stops seeing the capture at once. Call it only
//     after the controller has stopped indexing the capture (the object is
//     being deleted): a later Index writes the row again.
//
// All functions are safe for concurrent use as long as two of them do not
// write the same capture at once; the store must be open and is not closed.
package captures

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/spikehunt/spikehunt/internal/store"
)

// Statuses the captures table's status column holds. The operator writes
// StatusIndexed through Index; the others belong to earlier phases.
const (
	StatusFired    = "fired"
	StatusUploaded = "uploaded"
	StatusIndexed  = "indexed"
	StatusFailed   = "failed"
)

// Capture is one row of the captures table (internal/schema/migrations/
// 0004_captures.sql), field for column.
type Capture struct {
	ID string // capture_id
	// Host is the host name the agent reports in its telemetry: the spikes
	// table's host, which the link is made on.
	Host    string
	Node    string // the Kubernetes node name
	Backend string // perf, ftrace, bpftrace or wpr
	Profile string
	// WindowStart and WindowEnd are the wall-clock window the capture
	// covers, [fire − pre, fire + post), as its metadata records it.
	WindowStart time.Time
	WindowEnd   time.Time
	// Trigger is what fired it: local threshold, local p99, fleet alert,
	// manual, with the reason if there is one.
	Trigger string
	// SpikeIDs are the linked spike windows, oldest first. Index fills them;
	// on its input they are ignored.
	SpikeIDs []string
	URI      string // the content-addressed artifact location
	Bytes    uint64
	// LostEvents counts every event the trace is missing: the metadata's
	// lost events plus its overrun events (the table keeps one count, "events
	// the ring dropped or overwrote").
	LostEvents uint64
	Checksum   string
	Status     string // Index writes StatusIndexed
	// Findings are the capture's analysis on the node, nil when it has
	// none (yet).
	Findings *Findings
	// Namespace and Name are the Capture object the row comes from
	// (0010_capture_object.sql): the report server's address for it.
	// Empty for a capture no operator indexed (spikehunt demo).
	Namespace string
	Name      string
	// CreatedAt is when the row was first written: Index keeps the stored
	// one, or takes this, or now. UpdatedAt is the row's version; Index
	// stamps it.
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Findings are the columns of a capture's analysis (0009_capture_
// findings.sql): the slowest explained request's verdict and its blocking
// call chain, the window's hottest CPU (-1: no samples) and its share of
// softirq work.
type Findings struct {
	Verdict       string
	BlockingStack string
	HottestCPU    int16
	SoftirqShare  float32
}

var (
	// ErrInvalidCapture is wrapped by Index when the capture lacks what the
	// row's key needs.
	ErrInvalidCapture = errors.New("index: invalid capture")
	// ErrKeyChanged is wrapped by Index when a capture is already indexed
	// under another host or window_start: the key of its row.
	ErrKeyChanged = errors.New("index: a capture's host and window start cannot change")
	// ErrNotFound is wrapped by Get when no row has the capture id.
	ErrNotFound = errors.New("index: capture not found")
)

func (c Capture) validate() error {
	switch {
	case c.ID == "":
		return fmt.Errorf("%w: no id", ErrInvalidCapture)
	case c.Host == "":
		return fmt.Errorf("%w %s: no host", ErrInvalidCapture, c.ID)
	case c.WindowStart.IsZero() || c.WindowEnd.IsZero():
		return fmt.Errorf("%w %s: no window", ErrInvalidCapture, c.ID)
	case !c.WindowStart.Before(c.WindowEnd):
		return fmt.Errorf("%w %s: window start %s is not before its end %s", ErrInvalidCapture, c.ID,
			c.WindowStart.UTC().Format(time.RFC3339Nano), c.WindowEnd.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// Index links c to the live spike windows on c.Host that overlap its
// window, writes its captures row with those ids and status indexed, and
// returns the ids, oldest window first (empty, not nil, when none overlaps).
// It may be called again at any time: the row is replaced, see the package
// doc. Times are stored at millisecond precision.
func Index(ctx context.Context, st store.Store, c Capture) ([]string, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	c.WindowStart = c.WindowStart.UTC().Truncate(time.Millisecond)
	c.WindowEnd = c.WindowEnd.UTC().Truncate(time.Millisecond)

	prev, err := Get(ctx, st, c.ID)
	switch {
	case errors.Is(err, ErrNotFound):
		if c.CreatedAt.IsZero() {
			c.CreatedAt = time.Now()
		}
	case err != nil:
		return nil, fmt.Errorf("index capture %s: %w", c.ID, err)
	case prev.Host != c.Host || !prev.WindowStart.Equal(c.WindowStart):
		return nil, fmt.Errorf("%w: capture %s is indexed on host %s from %s, not on %s from %s", ErrKeyChanged, c.ID,
			prev.Host, prev.WindowStart.Format(time.RFC3339Nano), c.Host, c.WindowStart.Format(time.RFC3339Nano))
	default:
		c.CreatedAt = prev.CreatedAt
		if c.Findings == nil {
			c.Findings = prev.Findings // a re-index without them keeps them
		}
	}

	ids, err := overlappingSpikes(ctx, st, c.Host, c.WindowStart, c.WindowEnd)
	if err != nil {
		return nil, fmt.Errorf("index capture %s: %w", c.ID, err)
	}
	c.SpikeIDs = ids
	c.Status = StatusIndexed
	c.UpdatedAt = nextVersion(prev.UpdatedAt)
	if err := write(ctx, st, c); err != nil {
		return nil, fmt.Errorf("index capture %s: %w", c.ID, err)
	}
	return ids, nil
}

// SpikeLookBack bounds how long before a capture's window a spike window
// that overlaps it may have begun, so that the lookup reads a day of the
// host's spikes and not the table's year. Spike windows last seconds; a
// window is longer only when the slowness is sustained (an outage), and a
// day covers that too.
const SpikeLookBack = 24 * time.Hour

// overlappingSpikes returns the ids of the live spike windows on host that
// share an instant with [from, to), oldest first.
func overlappingSpikes(ctx context.Context, st store.Store, host string, from, to time.Time) ([]string, error) {
	q := fmt.Sprintf(`SELECT spike_id FROM spikes FINAL
WHERE host = %s AND is_deleted = 0 AND window_start >= %s AND window_start < %s AND window_end > %s
ORDER BY window_start, spike_id`, store.QuoteString(host), msLit(from.Add(-SpikeLookBack)), msLit(to), msLit(from))
	ids := []string{}
	err := st.Query(ctx, q, func(b store.Block) error {
		col, err := store.Column[string](b, "spike_id")
		if err != nil {
			return err
		}
		for i := 0; i < b.Rows; i++ {
			ids = append(ids, col.Row(i))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the spikes of host %s: %w", host, err)
	}
	return ids, nil
}

// write inserts c as one captures row.
func write(ctx context.Context, st store.Store, c Capture) error {
	var (
		id, uri, checksum                            proto.ColStr
		host, node, backend, profile, trigger, state = lowCardinality(), lowCardinality(), lowCardinality(), lowCardinality(), lowCardinality(), lowCardinality()
		windowStart, windowEnd, created, updated     = dateTime64ms(), dateTime64ms(), dateTime64ms(), dateTime64ms()
		spikeIDs                                     = proto.NewArray[string](new(proto.ColStr))
		size, lost                                   proto.ColUInt64
		verdict, blocking                            proto.ColStr
		hottest                                      proto.ColInt16
		softirq                                      proto.ColFloat32
		objNamespace                                 = lowCardinality()
		objName                                      proto.ColStr
	)
	id.Append(c.ID)
	host.Append(c.Host)
	node.Append(c.Node)
	backend.Append(c.Backend)
	profile.Append(c.Profile)
	windowStart.Append(c.WindowStart)
	windowEnd.Append(c.WindowEnd)
	trigger.Append(c.Trigger)
	spikeIDs.Append(c.SpikeIDs)
	uri.Append(c.URI)
	size.Append(c.Bytes)
	lost.Append(c.LostEvents)
	checksum.Append(c.Checksum)
	state.Append(c.Status)
	created.Append(c.CreatedAt.UTC().Truncate(time.Millisecond))
	updated.Append(c.UpdatedAt)
	f := Findings{HottestCPU: -1}
	if c.Findings != nil {
		f = *c.Findings
	}
	verdict.Append(f.Verdict)
	blocking.Append(f.BlockingStack)
	hottest.Append(f.HottestCPU)
	softirq.Append(f.SoftirqShare)
	objNamespace.Append(c.Namespace)
	objName.Append(c.Name)
	input := proto.Input{
		{Name: "capture_id", Data: &id}, {Name: "host", Data: host}, {Name: "node", Data: node},
		{Name: "backend", Data: backend}, {Name: "profile", Data: profile},
		{Name: "window_start", Data: windowStart}, {Name: "window_end", Data: windowEnd},
		{Name: "trigger", Data: trigger}, {Name: "spike_ids", Data: spikeIDs}, {Name: "uri", Data: &uri},
		{Name: "bytes", Data: &size}, {Name: "lost_events", Data: &lost}, {Name: "checksum", Data: &checksum},
		{Name: "status", Data: state}, {Name: "created_at", Data: created}, {Name: "updated_at", Data: updated},
		{Name: "verdict", Data: &verdict}, {Name: "blocking_stack", Data: &blocking},
		{Name: "hottest_cpu", Data: &hottest}, {Name: "softirq_share", Data: &softirq},
		{Name: "capture_namespace", Data: objNamespace}, {Name: "capture_name", Data: &objName},
	}
	if err := st.Insert(ctx, "captures", input); err != nil {
		return fmt.Errorf("write the captures row: %w", err)
	}
	return nil
}

var versions struct {
	sync.Mutex
	last time.Time
}

// nextVersion is an updated_at for a new version of a row whose stored
// version is prev: now at millisecond precision, but strictly after prev
// and after every version this process gave out, so that the new row wins
// even against a clock that stepped back or a write in the same millisecond.
func nextVersion(prev time.Time) time.Time {
	versions.Lock()
	defer versions.Unlock()
	t := time.Now().UTC().Truncate(time.Millisecond)
	for _, floor := range []time.Time{prev, versions.last} {
		if !t.After(floor) {
			t = floor.UTC().Add(time.Millisecond)
		}
	}
	versions.last = t
	return t
}

// DeleteOption adjusts Delete.
type DeleteOption func(*deleteTarget)

type deleteTarget struct{ cluster, database string }

// OnCluster makes Delete run on every server of a cluster, against the
// local tables (database.captures_local) that hold the rows: a
// lightweight DELETE cannot go through the Distributed table. Use the
// cluster and database the schema was applied with; not for a lone server.
func OnCluster(cluster, database string) DeleteOption {
	return func(t *deleteTarget) { t.cluster, t.database = cluster, database }
}

// Delete removes every row of the capture (retention: the artifact is gone
// or going). Deleting a capture that has no row is not an error, so a
// finalizer can retry. The rows are gone from every lookup when Delete
// returns.
func Delete(ctx context.Context, st store.Store, captureID string, opts ...DeleteOption) error {
	if captureID == "" {
		return fmt.Errorf("%w: no id", ErrInvalidCapture)
	}
	var t deleteTarget
	for _, o := range opts {
		o(&t)
	}
	table := "captures"
	if t.cluster != "" {
		if t.database == "" {
			return fmt.Errorf("delete capture %s: OnCluster needs the database the schema was applied to", captureID)
		}
		table = store.QuoteIdent(t.database) + "." + store.QuoteIdent("captures_local") + " ON CLUSTER " + store.QuoteString(t.cluster)
	}
	q := "DELETE FROM " + table + " WHERE capture_id = " + store.QuoteString(captureID)
	if err := st.Exec(ctx, q); err != nil {
		return fmt.Errorf("delete capture %s: %w", captureID, err)
	}
	return nil
}
