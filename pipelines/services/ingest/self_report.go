package ingest

import (
	"context"
	"slices"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
)

// ownFigures is what an ingester writes about itself (self_counters.go),
// gathered between reports by Run's goroutine.
//
// Rows are counted once their batch is committed, after the handshake, so
// a batch re-formed after a crash (intent.go) is counted by the ingester
// that commits it, once, whether or not the crashed one's insert landed.
// What a crash loses is the count of batches committed since the last
// report. Dead letters are counted as they are written; a batch read
// again after a crash dead-letters its bad messages again, and they count
// again, as the dead-letter topic holds them twice.
type ownFigures struct {
	w     *SelfCounters
	since time.Time                // start of the current interval
	rows  map[string]int64         // by destination
	dlq   map[[2]string]int64      // by source topic and reason
	lags  map[topicPartition]int64 // as of the partition's last fetch
}

func newOwnFigures(st store.Store, instance string) ownFigures {
	return ownFigures{w: NewSelfCounters(st, instance), since: time.Now(),
		rows: map[string]int64{}, dlq: map[[2]string]int64{}, lags: map[topicPartition]int64{}}
}

func (o *ownFigures) deadLettered(topic, reason string) {
	o.rows[DestDLQ]++
	o.dlq[[2]string{topic, reason}]++
}

// report writes the interval's rows: the rows stored and the dead letters
// since the last report, and the lag now. A failed write is logged, counted
// and retried with the next report; the ingest goes on either way.
func (in *Ingester) report(ctx context.Context) {
	o := &in.own
	now := time.Now()
	for _, d := range []string{DestRequests, DestCounters, DestDLQ} {
		o.w.Delta(MetricIngestRows, d, "", o.since, now, float64(o.rows[d]))
	}
	for _, topic := range []string{in.cfg.SpansTopic, in.cfg.MetricsTopic} {
		var reasons []string
		for k := range o.dlq {
			if k[0] == topic {
				reasons = append(reasons, k[1])
			}
		}
		slices.Sort(reasons)
		for _, r := range reasons {
			o.w.Delta(MetricIngestDLQ, topic, r, o.since, now, float64(o.dlq[[2]string{topic, r}]))
		}
		if len(reasons) == 0 {
			o.w.Delta(MetricIngestDLQ, topic, "", o.since, now, 0)
		}
		var lag int64
		for tp, l := range o.lags {
			if tp.topic == topic {
				lag += l
			}
		}
		o.w.Gauge(MetricIngestLag, topic, "", now, float64(lag))
	}
	clear(o.rows)
	clear(o.dlq)
	o.since = now
	if err := o.w.Flush(ctx); err != nil {
		in.m.retries.WithLabelValues("self_counters").Inc()
		in.log.Warn("ingest: own counters rows not stored yet; retrying with the next report", "err", err)
	}
}
