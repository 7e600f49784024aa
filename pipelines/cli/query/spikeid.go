package query

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spikehunt/spikehunt/internal/store"
)

// ShortIDLen is how many characters of a spike id the spikes table shows
// at least, as git shows a commit: 12 hex characters of the detector's 16
// (a 48-bit prefix). Where two ids shown share those, both are shown
// longer, until they differ; --spike takes any unique prefix, and says
// which ids an ambiguous one starts. -o json has the whole id.
const ShortIDLen = 12

// shortIDs maps each of ids to its shortest prefix of at least ShortIDLen
// characters that no other of ids starts with (the whole id when it is
// that short, or a prefix of another).
func shortIDs(ids []string) map[string]string {
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	out := make(map[string]string, len(sorted))
	for i, id := range sorted {
		n := ShortIDLen
		for _, j := range []int{i - 1, i + 1} {
			if j >= 0 && j < len(sorted) {
				n = max(n, commonPrefix(id, sorted[j])+1)
			}
		}
		out[id] = id[:min(n, len(id))]
	}
	return out
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// ErrUnknownSpike and ErrAmbiguousSpike are what --spike answers when its
// value names no spike window, or more than one.
var (
	ErrUnknownSpike   = errors.New("unknown spike id")
	ErrAmbiguousSpike = errors.New("ambiguous spike id")
)

// maxCandidates is how many ids an ambiguous prefix's error lists.
const maxCandidates = 10

// resolveSpike turns a --spike value, a whole spike id or a prefix of one,
// into the id. The ids are those of the spikes table, retracted windows
// included (a capture may still list one), and with alsoCaptures those the
// captures index lists. A whole id wins over the longer ids it prefixes.
func resolveSpike(ctx context.Context, st store.Store, prefix string, alsoCaptures bool) (string, error) {
	from := "SELECT spike_id AS id FROM spikes"
	if alsoCaptures {
		from += " UNION ALL SELECT arrayJoin(spike_ids) AS id FROM captures"
	}
	ids, err := readRows(ctx, st, "spikes", `SELECT id FROM (`+from+`) WHERE startsWith(id, `+store.QuoteString(prefix)+`)
	GROUP BY id ORDER BY id LIMIT `+fmt.Sprint(maxCandidates+1), func(c *columns) func(int) string {
		id := col[string](c, "id")
		return func(i int) string { return id.Row(i) }
	})
	if err != nil {
		return "", err
	}
	switch {
	case slices.Contains(ids, prefix):
		return prefix, nil
	case len(ids) == 1:
		return ids[0], nil
	case len(ids) == 0:
		return "", fmt.Errorf("%w %q: no spike window's id starts with it (spikehunt spikes shows the ids)", ErrUnknownSpike, prefix)
	}
	n, list := fmt.Sprint(len(ids)), ids
	if len(ids) > maxCandidates {
		n, list = fmt.Sprintf("more than %d", maxCandidates), append(ids[:maxCandidates:maxCandidates], "…")
	}
	return "", fmt.Errorf("%w %q: %s spike windows' ids start with it: %s; give more characters", ErrAmbiguousSpike, prefix, n, strings.Join(list, ", "))
}
