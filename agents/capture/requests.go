package capture

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"io"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// requestRing keeps the most recent requests the agent saw, so that a
// capture can be written with the requests of its window beside it: the
// slow request's thread id next to the thread's context switches (seed
// 004). Its capacity bounds its memory (about 100 bytes a request); when
// the pre-window held more requests than that, the oldest are gone and
// the artifact says from when its records are complete.
// Not safe for concurrent use: the engine holds its lock.
type requestRing struct {
	buf     []telemetry.Request
	next    int
	full    bool
	dropped uint64 // overwritten before any capture asked for them
}

func newRequestRing(capacity int) *requestRing {
	return &requestRing{buf: make([]telemetry.Request, capacity)}
}

func (r *requestRing) add(q *telemetry.Request) {
	if r.full {
		r.dropped++
	}
	r.buf[r.next] = *q
	r.next++
	if r.next == len(r.buf) {
		r.next, r.full = 0, true
	}
}

// window returns the requests that ended in [from, to], oldest first, and
// the end time of the oldest request still held (zero if the ring has not
// wrapped: then nothing is missing).
func (r *requestRing) window(from, to time.Time) ([]telemetry.Request, time.Time) {
	var out []telemetry.Request
	var oldest time.Time
	n := r.next
	start := 0
	if r.full {
		n, start = len(r.buf), r.next
		oldest = end(&r.buf[r.next])
	}
	for i := range n {
		q := &r.buf[(start+i)%len(r.buf)]
		if e := end(q); !e.Before(from) && !e.After(to) {
			out = append(out, *q)
		}
	}
	return out, oldest
}

func end(q *telemetry.Request) time.Time { return q.Start.Add(q.Duration) }

// writeRequests writes the records as JSON lines.
func writeRequests(w io.Writer, qs []telemetry.Request) ([]record.RequestRecord, error) {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	recs := make([]record.RequestRecord, 0, len(qs))
	for i := range qs {
		q := &qs[i]
		rec := record.RequestRecord{Start: q.Start, End: end(q), LatencyMS: float64(q.Duration) / 1e6,
			Service: q.Service, Endpoint: q.Endpoint, Status: q.Status, ThreadID: q.ThreadID, Weight: q.Weight}
		if q.TraceID != ([16]byte{}) {
			rec.TraceID = hex.EncodeToString(q.TraceID[:])
		}
		if q.SpanID != ([8]byte{}) {
			rec.SpanID = hex.EncodeToString(q.SpanID[:])
		}
		if err := enc.Encode(&rec); err != nil {
			return nil, err
		}
		recs = append(recs, rec)
	}
	return recs, bw.Flush()
}
