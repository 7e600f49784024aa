package intake

import (
	"log/slog"
	"strconv"
	"sync"
	"time"
)

// malformedLog logs malformed line-protocol lines: the first of each
// reason with a sample, then at most one a reason each malformedLogEvery,
// saying how many it did not log in between. Every line is counted in
// spikehunt_intake_drops_total whether or not it is logged; the log is
// there so that whoever owns the sending app can see what it sent.
//
// A sender that writes only bad lines would otherwise write a log line
// per datagram; the limit keeps that to one a minute per reason.
type malformedLog struct {
	log *slog.Logger
	mu  sync.Mutex
	by  map[string]*malformedReason
}

type malformedReason struct {
	last       time.Time // when it was last logged; zero: never
	suppressed int       // bad lines of this reason not logged since
}

// malformedLogEvery is the least time between two log lines of one
// reason.
const malformedLogEvery = time.Minute

// maxSampleBytes bounds the sample of a line in the log; the line came
// from anyone who can reach the socket.
const maxSampleBytes = 128

func newMalformedLog(log *slog.Logger) *malformedLog {
	return &malformedLog{log: log, by: map[string]*malformedReason{}}
}

// note records one line dropped as lerr at now, from source, and logs it
// when its reason's minute has passed. line is only read during the call.
func (m *malformedLog) note(now time.Time, source string, lerr *lineError, line []byte) {
	m.mu.Lock()
	r := m.by[lerr.reason]
	if r == nil {
		r = &malformedReason{}
		m.by[lerr.reason] = r
	}
	if !r.last.IsZero() && now.Sub(r.last) < malformedLogEvery {
		r.suppressed++
		m.mu.Unlock()
		return
	}
	suppressed := r.suppressed
	r.last, r.suppressed = now, 0
	m.mu.Unlock()
	m.log.Warn("intake: dropped a malformed line-protocol line",
		"source", source, "reason", lerr.reason, "error", lerr.msg,
		"sample", lineSample(line), "line_bytes", len(line),
		"suppressed", suppressed, "suppressed_over", malformedLogEvery.String(),
		"counted_in", "spikehunt_intake_drops_total")
}

// lineSample is the start of line as a Go-quoted string: control bytes,
// invalid UTF-8 and quotes come out escaped, so that the line cannot
// forge log lines or drive a terminal.
func lineSample(line []byte) string {
	cut := line
	if len(cut) > maxSampleBytes {
		cut = cut[:maxSampleBytes]
	}
	s := strconv.Quote(string(cut))
	if len(cut) < len(line) {
		s += "…"
	}
	return s
}
