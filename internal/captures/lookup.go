package captures

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
)

// Get returns the current row of a capture; the error wraps ErrNotFound
// when there is none.
func Get(ctx context.Context, st store.Store, captureID string) (Capture, error) {
	list, err := readCaptures(ctx, st, "capture_id = "+store.QuoteString(captureID))
	if err != nil {
		return Capture{}, fmt.Errorf("read capture %s: %w", captureID, err)
	}
	if len(list) == 0 {
		return Capture{}, fmt.Errorf("%w: %s", ErrNotFound, captureID)
	}
	// Only a changed key could leave two rows, and Index refuses that; the
	// newest is the one to believe.
	newest := list[0]
	for _, c := range list[1:] {
		if c.UpdatedAt.After(newest.UpdatedAt) {
			newest = c
		}
	}
	return newest, nil
}

// ListsSpike is the condition on the captures table (FINAL) that selects
// the rows linking spikeID: the captures of that spike window.
func ListsSpike(spikeID string) string {
	return "has(spike_ids, " + store.QuoteString(spikeID) + ")"
}

// WithoutCaptures is the condition on the spikes table that keeps the
// windows no captures row lists. captures has no is_deleted: a row,
// whatever its status, is a capture that was taken for those spikes, and
// a deleted capture's rows are gone (Delete).
const WithoutCaptures = "spike_id NOT IN (SELECT arrayJoin(spike_ids) FROM captures FINAL)"

// CapturesOfSpike returns the captures whose row lists the spike window,
// oldest window first: where to look for the trace of a stall.
func CapturesOfSpike(ctx context.Context, st store.Store, spikeID string) ([]Capture, error) {
	list, err := readCaptures(ctx, st, ListsSpike(spikeID))
	if err != nil {
		return nil, fmt.Errorf("read the captures of spike %s: %w", spikeID, err)
	}
	return list, nil
}

// Spike is a spike window as the lookups return it.
type Spike struct {
	ID          string
	Service     string
	Host        string
	HWClass     string
	WindowStart time.Time
	WindowEnd   time.Time
}

// Scope selects spike windows: those starting in [From, To), of Service and
// on Host when they are set.
type Scope struct {
	From, To time.Time
	Service  string
	Host     string
}

// SpikesWithoutCaptures returns the live spike windows of the scope that no
// captures row lists, oldest first: the stalls nobody has a trace of yet,
// which is where bait should go next.
func SpikesWithoutCaptures(ctx context.Context, st store.Store, s Scope) ([]Spike, error) {
	if !s.From.Before(s.To) {
		return nil, fmt.Errorf("spikes without captures: the range [%s, %s) is empty",
			s.From.UTC().Format(time.RFC3339), s.To.UTC().Format(time.RFC3339))
	}
	conds := []string{"is_deleted = 0", "window_start >= " + msLit(s.From), "window_start < " + msLit(s.To)}
	if s.Service != "" {
		conds = append(conds, "service = "+store.QuoteString(s.Service))
	}
	if s.Host != "" {
		conds = append(conds, "host = "+store.QuoteString(s.Host))
	}
	conds = append(conds, WithoutCaptures)
	q := `SELECT spike_id, toString(service) AS service, toString(host) AS host, toString(hw_class) AS hw_class,
    toUnixTimestamp64Milli(window_start) AS start_ms, toUnixTimestamp64Milli(window_end) AS end_ms
FROM spikes FINAL
WHERE ` + strings.Join(conds, " AND ") + `
ORDER BY window_start, service, host`
	var out []Spike
	err := st.Query(ctx, q, func(b store.Block) error {
		strs, err := store.Columns[string](b, "spike_id", "service", "host", "hw_class")
		if err != nil {
			return err
		}
		ms, err := store.Columns[int64](b, "start_ms", "end_ms")
		if err != nil {
			return err
		}
		for i := 0; i < b.Rows; i++ {
			out = append(out, Spike{ID: strs[0].Row(i), Service: strs[1].Row(i), Host: strs[2].Row(i), HWClass: strs[3].Row(i),
				WindowStart: fromMs(ms[0].Row(i)), WindowEnd: fromMs(ms[1].Row(i))})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read spikes without captures: %w", err)
	}
	return out, nil
}

// readCaptures reads the current captures rows matching cond, oldest window
// first.
func readCaptures(ctx context.Context, st store.Store, cond string) ([]Capture, error) {
	q := `SELECT capture_id, toString(host) AS host, toString(node) AS node, toString(backend) AS backend,
    toString(profile) AS profile, toString(trigger) AS trigger, uri, checksum, toString(status) AS status,
    toUnixTimestamp64Milli(window_start) AS start_ms, toUnixTimestamp64Milli(window_end) AS end_ms,
    toUnixTimestamp64Milli(created_at) AS created_ms, toUnixTimestamp64Milli(updated_at) AS updated_ms,
    spike_ids, bytes, lost_events, verdict, blocking_stack, hottest_cpu, softirq_share,
    toString(capture_namespace) AS capture_namespace, capture_name
FROM captures FINAL
WHERE ` + cond + `
ORDER BY window_start, capture_id`
	var out []Capture
	err := st.Query(ctx, q, func(b store.Block) error {
		strs, err := store.Columns[string](b, "capture_id", "host", "node", "backend", "profile", "trigger", "uri", "checksum", "status",
			"capture_namespace", "capture_name")
		if err != nil {
			return err
		}
		ms, err := store.Columns[int64](b, "start_ms", "end_ms", "created_ms", "updated_ms")
		if err != nil {
			return err
		}
		ids, err := store.Column[[]string](b, "spike_ids")
		if err != nil {
			return err
		}
		counts, err := store.Columns[uint64](b, "bytes", "lost_events")
		if err != nil {
			return err
		}
		found, err := store.Columns[string](b, "verdict", "blocking_stack")
		if err != nil {
			return err
		}
		hottest, err := store.Column[int16](b, "hottest_cpu")
		if err != nil {
			return err
		}
		softirq, err := store.Column[float32](b, "softirq_share")
		if err != nil {
			return err
		}
		for i := 0; i < b.Rows; i++ {
			out = append(out, Capture{
				ID: strs[0].Row(i), Host: strs[1].Row(i), Node: strs[2].Row(i), Backend: strs[3].Row(i),
				Profile: strs[4].Row(i), Trigger: strs[5].Row(i), URI: strs[6].Row(i), Checksum: strs[7].Row(i),
				Status: strs[8].Row(i), Namespace: strs[9].Row(i), Name: strs[10].Row(i),
				WindowStart: fromMs(ms[0].Row(i)), WindowEnd: fromMs(ms[1].Row(i)),
				CreatedAt: fromMs(ms[2].Row(i)), UpdatedAt: fromMs(ms[3].Row(i)),
				// Row may share the column's memory; the block is gone after fn.
				SpikeIDs: append([]string{}, ids.Row(i)...),
				Bytes:    counts[0].Row(i), LostEvents: counts[1].Row(i),
			})
			if f := (Findings{Verdict: found[0].Row(i), BlockingStack: found[1].Row(i), HottestCPU: hottest.Row(i),
				SoftirqShare: softirq.Row(i)}); f != (Findings{HottestCPU: -1}) {
				out[len(out)-1].Findings = &f
			}
		}
		return nil
	})
	return out, err
}

// ErrAmbiguous marks a capture id prefix that more than one capture
// starts.
var ErrAmbiguous = errors.New("ambiguous capture id")

// Resolve returns the capture whose id is idOrPrefix, or else the one
// capture whose id starts with it. No capture is an error wrapping
// ErrNotFound; more than one wraps ErrAmbiguous and names up to ten.
func Resolve(ctx context.Context, st store.Store, idOrPrefix string) (Capture, error) {
	if idOrPrefix == "" {
		return Capture{}, fmt.Errorf("%w: an empty capture id", ErrNotFound)
	}
	c, err := Get(ctx, st, idOrPrefix)
	if !errors.Is(err, ErrNotFound) {
		return c, err
	}
	var ids []string
	err = st.Query(ctx, `SELECT DISTINCT capture_id FROM captures WHERE startsWith(capture_id, `+store.QuoteString(idOrPrefix)+`)
ORDER BY capture_id LIMIT 11`, func(b store.Block) error {
		col, err := store.Column[string](b, "capture_id")
		if err != nil {
			return err
		}
		for i := 0; i < col.Rows(); i++ {
			ids = append(ids, col.Row(i))
		}
		return nil
	})
	switch {
	case err != nil:
		return Capture{}, fmt.Errorf("find captures starting %q: %w", idOrPrefix, err)
	case len(ids) == 0:
		return Capture{}, fmt.Errorf("%w: no capture id is or starts with %q (spikehunt captures lists them)", ErrNotFound, idOrPrefix)
	case len(ids) > 1:
		more := ""
		if len(ids) > 10 {
			ids, more = ids[:10], ", …"
		}
		return Capture{}, fmt.Errorf("%w: %q starts %s%s; give more of it", ErrAmbiguous, idOrPrefix, strings.Join(ids, ", "), more)
	}
	return Get(ctx, st, ids[0])
}
