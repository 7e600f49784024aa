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

// sender owns the socket and the datagram being filled; only its
// goroutine touches them.
type sender struct {
	cfg              Config
	network, address string
	dropped          *atomic.Uint64

	conn  net.Conn // nil until dialed, and after a failed send
	buf   []byte   // the datagram being filled
	lines uint64   // lines in buf
	line  []byte   // scratch for one line
}

func newSender(cfg Config, network, address string, dropped *atomic.Uint64) *sender {
	return &sender{
		cfg: cfg, network: network, address: address, dropped: dropped,
		buf:  make([]byte, 0, cfg.MaxDatagram),
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

// add appends r's line to the datagram, sending the datagram first if the
// line would not fit.
func (s *sender) add(r *record) {
	s.line = appendLine(s.line[:0], s.cfg.Service, r)
	if len(s.buf)+len(s.line) > s.cfg.MaxDatagram {
		s.flush()
	}
	s.buf = append(s.buf, s.line...)
	s.lines++
}

// flush sends the datagram, dialing first if need be. A failure drops the
// datagram's lines and the connection; the next flush redials, which is
// how the client finds an agent that started or restarted.
func (s *sender) flush() {
	if s.lines == 0 {
		return
	}
	err := s.send()
	if err != nil {
		s.dropped.Add(s.lines)
		if s.conn != nil {
			s.conn.Close()
			s.conn = nil
		}
	}
	s.buf, s.lines = s.buf[:0], 0
}

func (s *sender) send() error {
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
	_, err := s.conn.Write(s.buf)
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
