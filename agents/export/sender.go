package export

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spikehunt/spikehunt/agents/spool"
)

// sender moves records from the spool to the sink in spool order. Every
// record is written to the spool before it is sent (write-ahead), so a
// crash loses at most what the spool had not yet fsynced; the spool's ack
// point follows the contiguous prefix of delivered records, so a record is
// freed only once it and everything before it arrived.
//
// One goroutine (run) sends; done callbacks arrive on the sink's
// goroutines and only touch the in-flight bookkeeping under mu.
type sender struct {
	sp     *spool.Spool
	sink   Sink
	log    *slog.Logger
	m      *metrics
	wake   chan struct{}
	next   uint64                         // next sequence number to read from the spool
	readTo int                            // records per spool read
	sent   [KindMetrics + 1]atomic.Uint64 // records the sink accepted, by kind
	sentM  [KindMetrics + 1]prometheus.Counter

	mu       sync.Mutex
	inflight []uint64 // sent, in send order
	done     map[uint64]bool
	acked    uint64 // highest seq whose prefix is delivered
	sentAt   map[uint64]time.Time
}

func newSender(sp *spool.Spool, sink Sink, log *slog.Logger, m *metrics) *sender {
	s := &sender{sp: sp, sink: sink, log: log, m: m, wake: make(chan struct{}, 1), readTo: 64,
		done: map[uint64]bool{}, sentAt: map[uint64]time.Time{}}
	for _, k := range []Kind{KindTraces, KindMetrics} {
		s.sentM[k] = m.records.WithLabelValues(k.String(), "sent")
	}
	return s
}

// notify tells the sender the spool has new records.
func (s *sender) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run sends until ctx ends, then waits (bounded) for in-flight deliveries
// and persists the final ack point.
//
// It sleeps until there is something to do: notify (a record appended)
// and delivered (the ack point moved) wake it, and a timer only while the
// sink refuses records. An idle agent's sender costs no wake-ups.
func (s *sender) run(ctx context.Context) {
	backoff := 20 * time.Millisecond
	for ctx.Err() == nil {
		s.persistAck()
		recs, err := s.sp.Read(s.next, s.readTo)
		if err != nil && !errors.Is(err, spool.ErrClosed) {
			s.log.Error("read spool", "err", err)
		}
		sentAny := false
		for _, r := range recs {
			if len(r.Payload) < 1 {
				s.m.errors.WithLabelValues("corrupt_record").Inc()
				s.next = r.Seq + 1
				continue
			}
			kind, payload := Kind(r.Payload[0]), r.Payload[1:]
			s.track(r.Seq)
			err := s.sink.Send(kind, payload, func(err error) { s.delivered(r.Seq, kind, err) })
			if errors.Is(err, ErrFull) {
				s.untrack(r.Seq)
				break
			}
			if err != nil {
				s.untrack(r.Seq)
				s.log.Error("send", "sink", s.sink.Name(), "err", err)
				break
			}
			s.next = r.Seq + 1
			sentAny = true
			if kind == KindTraces || kind == KindMetrics {
				s.sent[kind].Add(1)
				s.sentM[kind].Inc()
			}
		}
		if sentAny {
			backoff = 20 * time.Millisecond
			continue
		}
		var retry *time.Timer
		var retryC <-chan time.Time
		if len(recs) > 0 { // the sink is full or failing: retry, backing off up to 1 s
			retry = time.NewTimer(backoff)
			retryC = retry.C
			backoff = min(backoff*2, time.Second)
		}
		select {
		case <-ctx.Done():
		case <-s.wake:
		case <-retryC:
		}
		if retry != nil {
			retry.Stop()
		}
	}
	s.persistAck()
}

func (s *sender) track(seq uint64) {
	s.mu.Lock()
	s.inflight = append(s.inflight, seq)
	s.sentAt[seq] = time.Now()
	s.mu.Unlock()
}

func (s *sender) untrack(seq uint64) {
	s.mu.Lock()
	if n := len(s.inflight); n > 0 && s.inflight[n-1] == seq {
		s.inflight = s.inflight[:n-1]
	}
	delete(s.sentAt, seq)
	s.mu.Unlock()
}

// delivered records a sink's answer. A record the sink can never deliver
// (too large, refused) is counted and let go: retrying it would stall every
// record behind it.
func (s *sender) delivered(seq uint64, kind Kind, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if errors.Is(err, ErrSinkClosed) {
		// Still in the spool and not acknowledged: sent again at the next
		// start. Nothing after it is acknowledged either.
		delete(s.sentAt, seq)
		return
	}
	if err != nil {
		s.m.errors.WithLabelValues(errReason(err)).Inc()
		s.m.records.WithLabelValues(kind.String(), "dropped").Inc()
		s.log.Error("record not delivered", "sink", s.sink.Name(), "kind", kind, "seq", seq, "err", err)
	} else {
		s.m.records.WithLabelValues(kind.String(), "delivered").Inc()
		if t, ok := s.sentAt[seq]; ok {
			s.m.latency.Observe(time.Since(t).Seconds())
		}
	}
	delete(s.sentAt, seq)
	s.done[seq] = true
	moved := false
	for len(s.inflight) > 0 && s.done[s.inflight[0]] {
		s.acked, moved = s.inflight[0], true
		delete(s.done, s.inflight[0])
		s.inflight = s.inflight[1:]
	}
	if moved {
		s.notify() // run persists the new ack point
	}
}

func (s *sender) persistAck() {
	s.mu.Lock()
	acked := s.acked
	s.mu.Unlock()
	if acked == 0 {
		return
	}
	if err := s.sp.Ack(acked); err != nil && !errors.Is(err, spool.ErrClosed) {
		s.log.Error("ack spool", "seq", acked, "err", err)
	}
}

func errReason(err error) string {
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	default:
		return "sink"
	}
}
