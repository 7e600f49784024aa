package intake

import (
	"net"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// limitConns caps the open connections of an OTLP server at
// otlp_max_connections. A connection beyond the cap is accepted and closed
// at once, not left in the kernel's backlog: its client sees the refusal
// and retries, instead of waiting behind connections that may be idle.
func (in *Intake) limitConns(ln net.Listener, server string) net.Listener {
	return &connLimiter{Listener: ln, max: int64(in.cfg.OTLPMaxConnections),
		open: in.m.conns.WithLabelValues(server), refused: in.m.connsRefused.WithLabelValues(server)}
}

type connLimiter struct {
	net.Listener
	max     int64
	n       atomic.Int64
	open    prometheus.Gauge
	refused prometheus.Counter
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.n.Add(1) > l.max {
			l.n.Add(-1)
			l.refused.Inc()
			c.Close()
			continue
		}
		l.open.Inc()
		return &limitedConn{Conn: c, l: l}, nil
	}
}

// limitedConn gives its place back when closed, once however often the
// server closes it.
type limitedConn struct {
	net.Conn
	l    *connLimiter
	once sync.Once
}

func (c *limitedConn) Close() error {
	c.once.Do(func() {
		c.l.n.Add(-1)
		c.l.open.Dec()
	})
	return c.Conn.Close()
}
