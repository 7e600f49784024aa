package query

import (
	"fmt"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
)

// Where is a WHERE clause under construction: conditions joined by AND.
// Every query of the commands, and of the demo's finding, builds its
// filter with it, so that what a time range, a service or a host selects
// is written once. (The demo's deletes of its own local rows keep literal
// conditions: there an empty host must not mean every host.)
// A Where is a value: each method returns a new one.
type Where struct{ conds []string }

// Live starts a filter on a detector table (spikes, spike_suspects,
// patterns) with only the rows the detectors have not retracted.
func Live() Where { return Where{}.And("is_deleted = 0") }

// And adds conditions written in SQL.
func (w Where) And(conds ...string) Where {
	return Where{conds: append(append([]string(nil), w.conds...), conds...)}
}

// Equals adds col = value, quoted; an empty value adds nothing (no filter).
func (w Where) Equals(col, value string) Where {
	if value == "" {
		return w
	}
	return w.And(col + " = " + store.QuoteString(value))
}

// During adds from <= col < to, for a DateTime or DateTime64 column.
func (w Where) During(col string, from, to time.Time) Where {
	return w.And(fmt.Sprintf("%s >= fromUnixTimestamp64Milli(%d, 'UTC') AND %s < fromUnixTimestamp64Milli(%d, 'UTC')",
		col, from.UnixMilli(), col, to.UnixMilli()))
}

// Overlaps adds the one time-range rule of the query commands: a row
// whose interval [startCol, endCol) shares an instant with [from, to) is
// in the range. Both intervals are half-open, so touching at an end is not
// overlap: a window ending at 12:00 is not in a range from 12:00, and a
// window starting at 12:00 is not in a range to 12:00. endCol may be an
// expression ("ts + INTERVAL 1 SECOND" for a per-second row). The
// captures dashboard selects by overlap too (dashboards/captures.go), but
// closed at both ends, as Grafana's time picker is: a row touching the
// picked range shows there and not here.
func (w Where) Overlaps(startCol, endCol string, from, to time.Time) Where {
	return w.And(fmt.Sprintf("%s < fromUnixTimestamp64Milli(%d, 'UTC') AND %s > fromUnixTimestamp64Milli(%d, 'UTC')",
		startCol, to.UnixMilli(), endCol, from.UnixMilli()))
}

// In adds col IN (values…), quoted.
func (w Where) In(col string, values []string) Where {
	q := make([]string, len(values))
	for i, s := range values {
		q[i] = store.QuoteString(s)
	}
	return w.And(col + " IN (" + strings.Join(q, ", ") + ")")
}

// String renders the conditions for after WHERE; "1" when there are none.
func (w Where) String() string {
	if len(w.conds) == 0 {
		return "1"
	}
	return strings.Join(w.conds, " AND ")
}

// Interval is how long a table's row lasts: [Start, End), two SQL
// expressions over its columns.
type Interval struct{ Start, End string }

// The intervals of the tables' rows, for Range and Filter.
var (
	// Second is a latency_1s row: one second, [ts, ts+1s).
	Second = Interval{"ts", "ts + INTERVAL 1 SECOND"}
	// Window is a spike window (spikes) or a capture's window (captures).
	Window = Interval{"window_start", "window_end"}
	// Lookback is a pattern's look-back (patterns).
	Lookback = Interval{"lookback_start", "lookback_end"}
)

// Range adds the scope's time range on rows lasting iv: the rows that
// overlap it (Overlaps).
func (s Scope) Range(w Where, iv Interval) Where {
	return w.Overlaps(iv.Start, iv.End, s.From, s.To)
}

// Filter adds the scope's time range on rows lasting iv, its service and
// its host, on a table with service and host columns.
func (s Scope) Filter(w Where, iv Interval) Where {
	return s.Range(w, iv).Equals("service", s.Service).Equals("host", s.Host)
}
