package ingest

import (
	"time"

	"github.com/ClickHouse/ch-go/proto"
)

// A timeWindow is the span of row times a batch accepts, [from, to] in
// the tables' microseconds; the zero value accepts every time.
//
// The window is checked per row, and the message is what goes to the
// dead-letter topic: an agent's export request carries the requests of
// every app on its node, so one app with a broken clock (or a hostile
// one: 120 SERVER spans one per day since 2001) must not take its
// neighbours' rows with it. The rows inside the window are inserted; the
// message goes to the dead-letter topic with reason "timestamp", a
// detail saying how many of its rows were refused and how many inserted,
// and the header spikehunt.dlq.partial = true when some were inserted, so
// that whoever replays it knows to skip those. Refused rows are counted
// (spikehunt_ingest_rows_refused_total).
//
// Why bound it at all: the tables are partitioned by day, and an insert
// block spanning more than max_partitions_per_insert_block days (100) is
// refused by ClickHouse as a whole (code 252); rows older than the table's
// TTL are dropped by the next merge anyway; rows from the future would be
// read as fresh by every detector until that time passes.
type timeWindow struct {
	from, to proto.DateTime64
	on       bool
}

// newTimeWindow is [now − maxAge, now + maxAhead]; a bound ≤ 0 is none.
func newTimeWindow(now time.Time, maxAge, maxAhead time.Duration) timeWindow {
	w := timeWindow{from: 0, to: proto.DateTime64(1<<63 - 1)}
	if maxAge > 0 {
		w.from, w.on = proto.DateTime64(now.Add(-maxAge).UnixMicro()), true
	}
	if maxAhead > 0 {
		w.to, w.on = proto.DateTime64(now.Add(maxAhead).UnixMicro()), true
	}
	return w
}

func (w timeWindow) holds(ts proto.DateTime64) bool { return !w.on || ts >= w.from && ts <= w.to }

// String is the window for a Detail.
func (w timeWindow) String() string {
	f := func(t proto.DateTime64) string { return time.UnixMicro(int64(t)).UTC().Format(time.RFC3339) }
	return "[" + f(w.from) + ", " + f(w.to) + "]"
}
