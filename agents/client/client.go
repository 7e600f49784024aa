// Package client records per-request latency from a Go app into the local
// spikehunt-agent over its line protocol (agents/intake, line.go), as one
// datagram per batch of requests on a unix datagram socket or UDP.
//
// Record is what the app calls once per request; it never blocks and does
// not allocate: it puts the request on a bounded queue and returns. One
// goroutine per Client formats queued requests into lines, packs them into
// datagrams of at most MaxDatagram bytes and sends one when it is full or
// every FlushInterval. A request is dropped and counted (Dropped) when the
// queue is full, when a send fails (no agent listening, its socket buffer
// full for a second) or when it is recorded after Close; nothing waits for
// the agent, which may start after the app and restart at will: the client
// redials on the next flush.
//
// Lifecycle: New starts the goroutine; Close flushes what is queued, stops
// the goroutine and closes the socket. Record and Dropped are safe for
// concurrent use; Record racing with Close may lose a request uncounted.
//
//	c, err := client.New(client.Config{Addr: "unixgram:///run/spikehunt/agent.sock", Service: "billy"})
//	…
//	c.Record("/search", time.Since(start), "200", traceID, threadID)
//	…
//	c.Close()
package client

import (
	"sync"
	"sync/atomic"
	"time"
)

// Client sends per-request latency to the agent. Build it with New.
type Client struct {
	ch      chan record
	dropped atomic.Uint64
	closed  atomic.Bool
	done    chan struct{}
	exited  chan struct{}
	once    sync.Once
}

// record is one Record call, formatted later by the sender.
type record struct {
	endpoint string
	status   string
	latency  time.Duration
	traceID  [16]byte
	threadID uint32
}

// New checks cfg and starts the sender. It does not dial: an agent that
// is not there yet costs dropped requests, not an error.
func New(cfg Config) (*Client, error) {
	network, address, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	c := &Client{
		ch:     make(chan record, cfg.QueueSize),
		done:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	s := newSender(cfg, network, address, &c.dropped)
	go func() {
		defer close(c.exited)
		s.run(c.ch, c.done)
	}()
	return c, nil
}

// Record records one served request: its endpoint (route), latency,
// status ("200", "OK", "ERROR"), trace id (zero for none) and the id of
// the thread that served it (0 for none). Names with spaces are sent with
// '_' in their place; names are cut to 256 bytes and statuses to 32.
func (c *Client) Record(endpoint string, latency time.Duration, status string, traceID [16]byte, threadID uint32) {
	if c.closed.Load() {
		c.dropped.Add(1)
		return
	}
	select {
	case c.ch <- record{endpoint: endpoint, status: status, latency: latency, traceID: traceID, threadID: threadID}:
	default:
		c.dropped.Add(1)
	}
}

// Dropped is the number of requests recorded but not sent.
func (c *Client) Dropped() uint64 { return c.dropped.Load() }

// Close sends what is queued (waiting at most a second for a busy agent),
// stops the sender and closes the socket. Later Records are dropped and
// counted. Close always returns nil; it has the error for io.Closer.
func (c *Client) Close() error {
	c.once.Do(func() {
		c.closed.Store(true)
		close(c.done)
		<-c.exited
		// A Record that passed the closed check before Store may have
		// queued after the sender's last look.
		c.dropped.Add(uint64(len(c.ch)))
	})
	return nil
}
