package client

import (
	"encoding/hex"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

const (
	// writeTimeout bounds one send. A unix datagram send blocks while the
	// agent's socket buffer is full; past this the batch is dropped.
	writeTimeout = time.Second
	// maxLatency is the longest latency the agent accepts (24 h).
	maxLatency     = 24 * time.Hour
	maxStatusBytes = 32
)

// heldDatagrams is how many full datagrams wait for the flush tick; one
// more sends them all at once. A full datagram waits rather than going at
// once because every datagram that finds the agent idle wakes it, and
// datagrams sent back to back are read in one wake-up: at 20,000
// requests/s a tick's lines fill one datagram and spill into a second,
// and sending both at the tick halves the agent's wake-ups. The cost is
// the memory of the datagrams held (4 × 60 KiB by default).
const heldDatagrams = 4

// sender owns the socket and the datagrams being filled; only its
// goroutine touches them.
type sender struct {
	cfg              Config
	network, address string
	dropped          *atomic.Uint64

	conn  net.Conn   // nil until dialed, and after a failed send
	buf   []byte     // the datagrams waiting for the tick, back to back
	full  []datagram // the full ones in buf
	start int        // where the datagram being filled starts in buf
	lines uint64     // lines in it
	line  []byte     // scratch for one line
}

// datagram is a full datagram in sender.buf, which ends at end.
type datagram struct {
	end   int
	lines uint64
}

func newSender(cfg Config, network, address string, dropped *atomic.Uint64) *sender {
	return &sender{
		cfg: cfg, network: network, address: address, dropped: dropped,
		buf:  make([]byte, 0, cfg.MaxDatagram),
		full: make([]datagram, 0, heldDatagrams),
		line: make([]byte, 0, 2*maxNameBytes+maxStatusBytes+64),
	}
}

// run batches records until done is closed, then sends what is queued.
func (s *sender) run(ch <-chan record, done <-chan struct{}) {
	t := time.NewTicker(s.cfg.FlushInterval)
	defer t.Stop()
	defer func() {
		if s.conn != nil {
			s.conn.Close()
		}
	}()
	for {
		select {
		case r := <-ch:
			s.add(&r)
		case <-t.C:
			s.flush()
		case <-done:
			for {
				select {
				case r := <-ch:
					s.add(&r)
				default:
					s.flush()
					return
				}
			}
		}
	}
}

// add appends r's line to the datagram being filled, starting a new one
// if the line would not fit, and sends them all when heldDatagrams are
// full.
func (s *sender) add(r *record) {
	s.line = appendLine(s.line[:0], s.cfg.Service, r)
	if s.lines > 0 && len(s.buf)-s.start+len(s.line) > s.cfg.MaxDatagram {
		s.full = append(s.full, datagram{end: len(s.buf), lines: s.lines})
		s.start, s.lines = len(s.buf), 0
		if len(s.full) == heldDatagrams {
			s.flush()
		}
	}
	s.buf = append(s.buf, s.line...)
	s.lines++
}

// flush sends the datagrams, back to back, dialing first if need be. A
// failure drops the lines of that datagram and of those after it, and the
// connection; the next flush redials, which is how the client finds an
// agent that started or restarted.
func (s *sender) flush() {
	if s.lines > 0 {
		s.full = append(s.full, datagram{end: len(s.buf), lines: s.lines})
	}
	from := 0
	for i, d := range s.full {
		if err := s.send(s.buf[from:d.end]); err != nil {
			for _, lost := range s.full[i:] {
				s.dropped.Add(lost.lines)
			}
			if s.conn != nil {
				s.conn.Close()
				s.conn = nil
			}
			break
		}
		from = d.end
	}
	s.buf, s.full, s.start, s.lines = s.buf[:0], s.full[:0], 0, 0
}

func (s *sender) send(dgram []byte) error {
	if s.conn == nil {
		c, err := net.DialTimeout(s.network, s.address, writeTimeout)
		if err != nil {
			return err
		}
		s.conn = c
	}
	if err := s.conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return err
	}
	_, err := s.conn.Write(dgram)
	return err
}

// appendLine appends "<service> <endpoint> <latency_us> <status>
// [trace_id|-] [thread_id]\n".
func appendLine(b []byte, service string, r *record) []byte {
	b = append(b, service...)
	b = append(b, ' ')
	b = appendToken(b, r.endpoint, maxNameBytes, "unknown")
	b = append(b, ' ')
	lat := min(max(r.latency, 0), maxLatency)
	b = strconv.AppendInt(b, lat.Microseconds(), 10)
	b = append(b, ' ')
	b = appendToken(b, r.status, maxStatusBytes, "UNSET")
	if r.traceID != ([16]byte{}) {
		b = append(b, ' ')
		b = hex.AppendEncode(b, r.traceID[:])
	} else if r.threadID != 0 {
		b = append(b, " -"...)
	}
	if r.threadID != 0 {
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(r.threadID), 10)
	}
	return append(b, '\n')
}

// appendToken appends s as one field: at most limit bytes cut at a rune,
// valid UTF-8, whitespace as '_', and empty as def.
func appendToken(b []byte, s string, limit int, def string) []byte {
	if s == "" {
		return append(b, def...)
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	start := len(b)
	b = append(b, s...)
	for i := start; i < len(b); i++ {
		switch b[i] {
		case ' ', '\t', '\n', '\r', '\v', '\f':
			b[i] = '_'
		}
	}
	return b
}
