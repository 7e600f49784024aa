package intake

import (
	"errors"
	"net"
	"sync/atomic"

	"github.com/spikehunt/spikehunt/internal/peerconns"
)

// gateConns caps the open connections of an OTLP server: at most
// otlp_max_connections, at most otlp_max_connections_per_peer of one peer,
// and the last sixteenth of the places only for the trusted senders of
// trigger.cidrs. A connection that finds no place takes the place of an
// idle one (internal/peerconns), so idle connections, however many,
// cannot keep a sender out; one that finds every connection in its way
// busy is accepted and closed at once, not left in the kernel's backlog:
// its client sees the refusal and retries.
func (in *Intake) gateConns(ln net.Listener, server string) (*peerconns.Listener, error) {
	open := in.m.conns.WithLabelValues(server)
	var closed [3]struct {
		r peerconns.Reason
		c interface{ Inc() }
	}
	for i, r := range []peerconns.Reason{peerconns.PeerFull, peerconns.ServerFull, peerconns.EvictedIdle} {
		closed[i].r, closed[i].c = r, in.m.connsRefused.WithLabelValues(server, string(r))
	}
	return peerconns.Listen(ln, peerconns.Config{
		Max:      in.cfg.OTLPMaxConnections,
		PerPeer:  in.cfg.OTLPMaxConnectionsPerPeer,
		Reserved: peerconns.DefaultReserved(in.cfg.OTLPMaxConnections),
		Trusted:  in.trust.addr,
		Opened:   func(d int) { open.Add(float64(d)) },
		Closed: func(r peerconns.Reason) {
			for _, c := range closed {
				if c.r == r {
					c.c.Inc()
				}
			}
		},
	})
}

// headerGuardListener closes a gRPC connection whose client sends a
// header block (a HEADERS frame and its CONTINUATIONs) longer on the wire
// than maxHeaderGuardBytes, and counts it. grpc-go itself refuses a
// header list past grpc.MaxHeaderListSize only after reading all of it,
// and sends a grpc-go client the limit, so a block past it is an attack:
// it is cut as it arrives, before the reading costs more.
type headerGuardListener struct {
	net.Listener
	oversize func()
}

func (l *headerGuardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &headerGuard{Conn: c, oversize: l.oversize, skip: int64(len(http2Preface))}, nil
}

// http2Preface is what an HTTP/2 client sends before its first frame.
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// maxHeaderGuardBytes is twice maxHeaderListBytes: a header block's wire
// size is at most its list size (HPACK only shrinks a field, and adds no
// more than a few bytes to one, where the list size adds 32), plus a
// frame's padding.
const maxHeaderGuardBytes = 2 * maxHeaderListBytes

var errOversizeHeaders = errors.New("intake: gRPC header block larger than the agent takes")

// headerGuard reads the frame headers of what its client sends, never the
// payloads: Read is on the connection's one reader goroutine.
type headerGuard struct {
	net.Conn
	oversize func()
	skip     int64   // bytes of the preface or a frame's payload still to pass
	hdr      [9]byte // a frame header being read
	hn       int
	block    int64 // bytes of the header block being read
	failed   bool
	// inBlock is block, for Close on another goroutine; counted says the
	// connection was counted, by Read or by Close, once.
	inBlock atomic.Int64
	counted atomic.Bool
}

func (c *headerGuard) Read(p []byte) (int, error) {
	if c.failed {
		return 0, errOversizeHeaders
	}
	n, err := c.Conn.Read(p)
	if !c.scan(p[:n]) {
		c.failed = true
		if c.counted.CompareAndSwap(false, true) {
			c.oversize()
		}
		return 0, errOversizeHeaders
	}
	c.inBlock.Store(c.block)
	return n, err
}

// Close counts a connection that grpc-go closes in the middle of a header
// block longer than it takes, before the guard saw the block pass its own
// bar: the first HEADERS frame of a flood is 16 KiB, which the guard lets
// through, and grpc-go's framer refuses the header list it decodes from
// it and closes the connection; whether the guard read the next frame's
// header first was up to the scheduler (7 of 8 flood connections counted,
// under load).
func (c *headerGuard) Close() error {
	if c.inBlock.Load() > maxHeaderListBytes && c.counted.CompareAndSwap(false, true) {
		c.oversize()
	}
	return c.Conn.Close()
}

// scan follows the frames in b; false once a header block is too long.
func (c *headerGuard) scan(b []byte) bool {
	for len(b) > 0 {
		if c.skip > 0 {
			k := min(c.skip, int64(len(b)))
			c.skip -= k
			b = b[k:]
			continue
		}
		k := copy(c.hdr[c.hn:], b)
		c.hn += k
		b = b[k:]
		if c.hn < len(c.hdr) {
			return true
		}
		c.hn = 0
		length := int64(c.hdr[0])<<16 | int64(c.hdr[1])<<8 | int64(c.hdr[2])
		switch c.hdr[3] {
		case 0x1: // HEADERS
			c.block = length
		case 0x9: // CONTINUATION
			c.block += length
		}
		if c.block > maxHeaderGuardBytes {
			return false
		}
		if c.hdr[3] == 0x1 || c.hdr[3] == 0x9 {
			if c.hdr[4]&0x4 != 0 { // END_HEADERS
				c.block = 0
			}
		}
		c.skip = length
	}
	return true
}
