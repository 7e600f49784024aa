package intake

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// listenUDP binds the line-protocol UDP socket.
func (in *Intake) listenUDP(ctx context.Context) (net.PacketConn, error) {
	var lc net.ListenConfig
	pc, err := lc.ListenPacket(ctx, "udp", in.cfg.LineUDP)
	if err != nil {
		return nil, fmt.Errorf("line udp: %w", err)
	}
	setReadBuffer(pc, in.cfg.SocketReadBuffer, in)
	return pc, nil
}

// setReadBuffer asks for SO_RCVBUF; the kernel may grant less
// (net.core.rmem_max), which is worth a log line but not a failure.
func setReadBuffer(pc net.PacketConn, size int, in *Intake) {
	type readBufferer interface{ SetReadBuffer(int) error }
	if rb, ok := pc.(readBufferer); ok {
		if err := rb.SetReadBuffer(size); err != nil {
			in.log.Warn("intake: set socket read buffer", "addr", pc.LocalAddr().String(), "err", err)
		}
	}
}

// serveLines reads datagrams from pc until it is closed. It owns buf; the
// byte slices of a parsed line alias it and die with the next read. Each
// datagram's sender is checked against the trigger allow-list
// (trust.go): a few comparisons, no state kept per sender, so that a
// flood of new sources costs no memory.
func (in *Intake) serveLines(pc net.PacketConn, src *sourceMetrics) {
	r, err := newDatagramReader(pc)
	if err != nil {
		in.log.Error("intake: line receiver stopped", "source", src.name, "err", err)
		return
	}
	buf := make([]byte, MaxDatagram+1) // one spare byte tells a truncated datagram
	from := telemetry.Sender{Source: src.name}
	for {
		n, err := r.read(buf, &from)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Reads on a datagram socket fail only transiently (e.g. an
			// ICMP error queued on a UDP socket); do not spin on them.
			in.log.Debug("intake: read datagram", "source", src.name, "err", err)
			time.Sleep(time.Millisecond)
			continue
		}
		if n > MaxDatagram {
			src.drop(errDatagramTooLarge.reason, 1)
			continue
		}
		in.trust.decide(&from)
		in.consumeDatagram(src, buf[:n], in.now(), &from)
	}
}

var errNoRawConn = errors.New("socket does not expose its file descriptor")

// consumeDatagram files every line of one datagram received at end from
// from.
func (in *Intake) consumeDatagram(src *sourceMetrics, dgram []byte, end time.Time, from *telemetry.Sender) {
	in.mu.RLock()
	defer in.mu.RUnlock()
	k := newTally(in, src, end.UnixNano())
	defer k.flush()
	var r telemetry.Request
	var rec lineRecord
	for rest := dgram; len(rest) > 0; {
		var line []byte
		line, rest = nextLine(rest)
		lerr := parseLine(line, &rec)
		if lerr == errBlank {
			continue
		}
		if lerr != nil {
			src.drop(lerr.reason, 1)
			in.malformed.note(end, src.name, lerr, line)
			continue
		}
		if in.closed {
			src.drop(reasonClosed, 1)
			continue
		}
		// The sampler needs only the latency and the trace id; the rest of
		// r is filled in for the few requests it keeps.
		r.Duration, r.TraceID = rec.latency, rec.traceID
		if classify(&k, rec.service, rec.endpoint, &r) {
			r.Start, r.ThreadID, r.Status = end.Add(-rec.latency), rec.threadID, statusString(rec.status)
			in.offerFrom(src, &r, from)
		}
	}
}

// statusString interns the common statuses: HTTP codes and the OTel span
// status names cost no garbage.
func statusString(b []byte) string {
	if len(b) == 3 {
		if c, ok := parseDecimal(b, 599); ok && c >= 100 {
			return statusCodes[c]
		}
	}
	switch string(b) {
	case "OK":
		return "OK"
	case "ERROR":
		return "ERROR"
	case "UNSET":
		return "UNSET"
	}
	return string(b)
}
