package kafkacluster

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// loadRate is the requests per second the load sends: a busy host's
// worth, light enough for the two cores the tests share.
const loadRate = 2000

// load sends requests with unique trace ids (1, 2, 3, … as 32 hex digits)
// to the agent's line-protocol socket at loadRate, in datagrams of 50,
// until stop. A datagram blocks while the agent's socket buffer is full,
// so none is lost before the agent.
type load struct {
	sent   atomic.Int64
	cancel context.CancelFunc
	done   chan error
}

func startLoad(t testing.TB, sock string) *load {
	t.Helper()
	c, err := net.Dial("unixgram", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel, done: make(chan error, 1)}
	go func() {
		defer c.Close()
		l.done <- l.run(ctx, c)
	}()
	t.Cleanup(func() { l.stop() })
	return l
}

func (l *load) run(ctx context.Context, c net.Conn) error {
	const perDgram = 50
	tick := time.NewTicker(time.Second * perDgram / loadRate)
	defer tick.Stop()
	var b strings.Builder
	for next := int64(0); ; next += perDgram {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		b.Reset()
		for i := next; i < next+perDgram; i++ {
			fmt.Fprintf(&b, "billy /get %d 200 %032x 7\n", 1000+i%500, i+1)
		}
		if _, err := c.Write([]byte(b.String())); err != nil {
			return fmt.Errorf("send to the agent: %w", err)
		}
		l.sent.Store(next + perDgram)
	}
}

// stop ends the load and returns how many requests it sent.
func (l *load) stop() (int64, error) {
	l.cancel()
	err := <-l.done
	l.done <- err // a second stop (the cleanup) gets the same answer
	return l.sent.Load(), err
}

// probe reads the spans topic as a consumer does (read committed, no
// group) and notes when each poll brought new records: the gaps between
// those times are the pauses a consumer of the cluster sees.
type probe struct {
	mu       sync.Mutex
	arrivals []time.Time
	cancel   context.CancelFunc
	done     chan struct{}
}

func startProbe(t testing.TB, c *testenv.KafkaCluster, topic string) *probe {
	t.Helper()
	// It looks for a partition's new leader every 250 ms, not franz-go's
	// 5 s, so that its own search adds little to the pause it measures.
	cl, err := c.Client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &probe{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			if fs.NumRecords() > 0 {
				p.mu.Lock()
				p.arrivals = append(p.arrivals, time.Now())
				p.mu.Unlock()
			}
		}
	}()
	t.Cleanup(p.stop)
	return p
}

func (p *probe) stop() {
	p.cancel()
	<-p.done
}

// waitArrival waits until records arrive after t0, and says how long
// after t0 the first did.
func (p *probe) waitArrival(t0 time.Time, timeout time.Duration) (time.Duration, error) {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		p.mu.Lock()
		i, _ := slices.BinarySearchFunc(p.arrivals, t0, func(a, t time.Time) int { return a.Compare(t) })
		var first time.Time
		if i < len(p.arrivals) {
			first = p.arrivals[i]
		}
		p.mu.Unlock()
		if !first.IsZero() {
			return first.Sub(t0), nil
		}
	}
	return 0, fmt.Errorf("no record readable within %v of %s", timeout, t0.Format(time.TimeOnly))
}

// longestGap is the pause: the longest time within [from, to] in which
// no new record became readable, from to the first arrival, between two
// arrivals, and from the last one to to.
func (p *probe) longestGap(from, to time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	prev, gap := from, time.Duration(0)
	for _, a := range p.arrivals {
		if a.Before(from) || a.After(to) {
			continue
		}
		gap = max(gap, a.Sub(prev))
		prev = a
	}
	return max(gap, to.Sub(prev))
}
