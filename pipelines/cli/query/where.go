package query

import (
	"fmt"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/pipelines/store"
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

// Range adds the scope's time range on the time column col.
func (s Scope) Range(w Where, col string) Where { return w.During(col, s.From, s.To) }

// Filter adds the scope's time range on col, its service and its host, on
// a table with service and host columns.
func (s Scope) Filter(w Where, col string) Where {
	return s.Range(w, col).Equals("service", s.Service).Equals("host", s.Host)
}
