package client_test

import (
	"bytes"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/agents/client"
)

// lineSink is a unix datagram socket that counts the lines it receives.
// Unix datagram sends block rather than drop, so every line arrives.
type lineSink struct {
	pc    net.PacketConn
	lines atomic.Int64
}

func newLineSink(b *testing.B) *lineSink {
	path := socketPath(b)
	pc, err := net.ListenPacket("unixgram", path)
	if err != nil {
		b.Fatal(err)
	}
	s := &lineSink{pc: pc}
	go func() {
		buf := make([]byte, 1<<16)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			s.lines.Add(int64(bytes.Count(buf[:n], []byte{'\n'})))
		}
	}()
	b.Cleanup(func() { pc.Close() })
	return s
}

// waitFor waits until n lines have arrived or been dropped (a send that
// waited a second for a starved reader).
func (s *lineSink) waitFor(b *testing.B, c *client.Client, n int) {
	deadline := time.Now().Add(10 * time.Second)
	for s.lines.Load()+int64(c.Dropped()) < int64(n) {
		if time.Now().After(deadline) {
			b.Fatalf("sink got %d of %d lines", s.lines.Load(), n)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

var benchTrace = [16]byte{0x4b, 0xf9, 0x2f, 0x35, 15: 0x36}

// BenchmarkRecord is the cost of an accepted Record: the queue never
// fills (the timer stops while the sender catches up). sent/s is the
// sender's sustained rate, formatting and datagrams included.
func BenchmarkRecord(b *testing.B) {
	sink := newLineSink(b)
	const queue = 1 << 16
	c, err := client.New(client.Config{Addr: "unixgram://" + sink.pc.LocalAddr().String(), Service: "billy", QueueSize: queue})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if i%(queue/2) == 0 && i > 0 {
			b.StopTimer()
			sink.waitFor(b, c, i-queue/4) // the last datagram may wait for its flush
			b.StartTimer()
		}
		c.Record("/search/{q}", 5210*time.Microsecond, "200", benchTrace, 21560)
	}
	b.StopTimer()
	c.Close()
	sink.waitFor(b, c, b.N)
	b.ReportMetric(float64(sink.lines.Load())/time.Since(start).Seconds(), "sent/s")
	b.ReportMetric(100*float64(c.Dropped())/float64(b.N), "%dropped")
}

// BenchmarkRecordQueueFull is the cost of a Record that finds the queue
// full, from every CPU at once: what an app pays when the agent is far
// behind.
func BenchmarkRecordQueueFull(b *testing.B) {
	c, err := client.New(client.Config{Addr: "unixgram://" + socketPath(b), Service: "billy", QueueSize: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Record("/search/{q}", 5210*time.Microsecond, "200", benchTrace, 21560)
		}
	})
}
