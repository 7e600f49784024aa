package ingest

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/spikehunt/spikehunt/internal/store"
)

// A token ClickHouse has seen is no proof that its rows are stored. A
// non-replicated MergeTree writes an insert's block id to its
// deduplication log before it renames the new part into place; a process
// killed between the two (the embedded engine dies with the ingest) or an
// insert that fails there leaves the id without the part. The batch's
// next insert under that token, from its intent or a retry, is then
// dropped as a repeat and its rows are lost without an error.
//
// So a batch that may be such a repeat (re-formed from an intent, or
// whose insert was tried more than once) is checked after its insert:
// one row of each day it holds (a day is the tables' partition, and an
// insert writes one part per partition) is looked up by the table's
// sorting key. The rows of a day whose row is missing are inserted again
// under a token of their own, "<batch token>/again/<day>/<n>", until the
// row is there or maxAgain inserts were tried. The check costs a query a
// day on the rare batches it concerns and nothing on the others.
//
// A batch split by ClickHouse refusing rows (flush.go) is not checked:
// its halves have tokens of their own and some of its messages are
// dead letters, so no one row stands for a day.

// maxAgain bounds the inserts of a day's rows after its check failed.
// Past it the ingest says so and moves on: the rows may be gone for a
// reason no insert mends (a TTL dropping the part right away).
const maxAgain = 3

// probe is one row of a batch standing for the rows of its day.
type probe struct {
	day   int64  // days since 1970-01-01, UTC
	where string // the row, by the table's sorting key and its ids
}

const dayMicros = int64(24 * time.Hour / time.Microsecond)

func dayOf(ts proto.DateTime64) int64 {
	d := int64(ts) / dayMicros
	if int64(ts) < 0 && int64(ts)%dayMicros != 0 {
		d--
	}
	return d
}

// probes returns the first row of each day of the batch.
func (r *RequestRows) probes() []probe {
	return firstOfEachDay(r.ts.Data, func(i int) string {
		return fmt.Sprintf("service = %s AND host = %s AND ts = fromUnixTimestamp64Micro(%d, 'UTC') AND trace_id = unhex('%x') AND span_id = unhex('%x')",
			store.QuoteString(r.service.Row(i)), store.QuoteString(r.host.Row(i)), int64(r.ts.Data[i]), r.traceID.Row(i), r.spanID.Row(i))
	})
}

// probes returns the first row of each day of the batch.
func (c *CounterRows) probes() []probe {
	return firstOfEachDay(c.tsStart.Data, func(i int) string {
		return fmt.Sprintf("host = %s AND metric = %s AND mode = %s AND device = %s AND cpu = %d AND ts_start = fromUnixTimestamp64Micro(%d, 'UTC') AND interval_ms = %d",
			store.QuoteString(c.host.Row(i)), store.QuoteString(c.metric.Row(i)), store.QuoteString(c.mode.Row(i)),
			store.QuoteString(c.device.Row(i)), c.cpu[i], int64(c.tsStart.Data[i]), c.interval[i])
	})
}

// firstOfEachDay is a probe for the first row of each day in ts, the
// row's lookup written by where.
func firstOfEachDay(ts []proto.DateTime64, where func(i int) string) []probe {
	var ps []probe
	for i, t := range ts {
		if d := dayOf(t); !hasDay(ps, d) {
			ps = append(ps, probe{day: d, where: where(i)})
		}
	}
	return ps
}

// hasDay: a batch holds a day or two, so a scan beats a map.
func hasDay(ps []probe, d int64) bool {
	for _, p := range ps {
		if p.day == d {
			return true
		}
	}
	return false
}

// ensureLanded checks that every day of b's rows is in its table and
// inserts again the days that are not (see above). tok is the token b
// was inserted under.
func (in *Ingester) ensureLanded(ctx context.Context, tp topicPartition, b *partBatch, it intent, tok string) error {
	table := in.table(tp.topic)
	var probes []probe
	if tp.topic == in.cfg.MetricsTopic {
		probes = b.counters.probes()
	} else {
		probes = b.spans.probes()
	}
	for _, p := range probes {
		for again := 0; ; again++ {
			var n int
			err := in.retry(ctx, tp, it, stepInsert, func() error {
				t, err := store.Select(ctx, in.st, "SELECT count() FROM "+table+" WHERE "+p.where)
				if err != nil {
					return err
				}
				if len(t.Rows) != 1 || len(t.Rows[0]) != 1 {
					return fmt.Errorf("ingest: checking a batch landed: %d rows from a count", len(t.Rows))
				}
				n, err = strconv.Atoi(t.Rows[0][0])
				return err
			})
			if err != nil {
				return err
			}
			if n > 0 {
				break
			}
			day := time.UnixMicro(p.day * dayMicros).UTC().Format(time.DateOnly)
			if again == maxAgain {
				in.log.Error("ingest: a batch's rows are not in the table after inserting them again; moving on",
					"table", table, "topic", tp.topic, "partition", tp.partition, "offsets", offsets(it), "day", day, "inserts", maxAgain)
				break
			}
			in.m.relanded.WithLabelValues(table).Inc()
			in.log.Warn("ingest: a batch ClickHouse had taken as a repeat is not in the table; inserting its rows again",
				"table", table, "topic", tp.topic, "partition", tp.partition, "offsets", offsets(it), "day", day, "token", tok)
			input := in.decodeDay(tp, b, p.day)
			sub := tok + "/again/" + day + "/" + strconv.Itoa(again+1)
			if err := in.retry(ctx, tp, it, stepInsert, func() error {
				return in.st.Insert(ctx, table, input, store.WithSetting("distributed_foreground_insert", "1"),
					store.WithSetting("insert_deduplication_token", sub))
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

// decodeDay builds the rows of b's messages that fall on day, within b's
// window, in a scratch batch; the block is valid until the next call.
func (in *Ingester) decodeDay(tp topicPartition, b *partBatch, day int64) proto.Input {
	w := b.window
	from, to := proto.DateTime64(day*dayMicros), proto.DateTime64((day+1)*dayMicros-1)
	if !w.on || w.from < from {
		w.from = from
	}
	if !w.on || w.to > to {
		w.to = to
	}
	w.on = true
	input, _ := in.decodeWithin(tp, w, b.kept)
	return input
}

func offsets(it intent) string {
	return strconv.FormatInt(it.first, 10) + "-" + strconv.FormatInt(it.last, 10)
}
