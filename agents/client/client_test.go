package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/agents/client"
	"github.com/spikehunt/spikehunt/agents/intake"
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

func socketPath(t testing.TB) string {
	dir, err := os.MkdirTemp("", "shc") // short: sun_path holds 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "agent.sock")
}

// startAgent runs a real intake that keeps every request.
func startAgent(t testing.TB, cfg intake.Config) *intake.Intake {
	t.Helper()
	cfg.SampleEvery = 1
	cfg.QueueSize = 1 << 16
	in, err := intake.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	if err := in.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return in
}

func collect(t testing.TB, in *intake.Intake, n int) []telemetry.Request {
	t.Helper()
	got := collectUntil(in, n, 10*time.Second)
	if len(got) < n {
		t.Fatalf("got %d of %d requests", len(got), n)
	}
	return got
}

// collectUntil reads up to n requests, for at most d.
func collectUntil(in *intake.Intake, n int, d time.Duration) []telemetry.Request {
	var got []telemetry.Request
	deadline := time.After(d)
	for len(got) < n {
		select {
		case r := <-in.Out():
			got = append(got, r)
		case <-deadline:
			return got
		}
	}
	return got
}

// keepReceived is want without the requests that did not arrive (their
// latencies are all distinct), for a transport that may drop.
func keepReceived(want, got []sent) []sent {
	arrived := map[time.Duration]bool{}
	for _, g := range got {
		arrived[g.Latency] = true
	}
	var out []sent
	for _, w := range want {
		if arrived[w.Latency] {
			out = append(out, w)
		}
	}
	return out
}

type sent struct {
	Endpoint string
	Latency  time.Duration
	Status   string
	TraceID  [16]byte
	ThreadID uint32
}

func TestEndToEnd(t *testing.T) {
	path := socketPath(t)
	in := startAgent(t, intake.Config{LineUDP: "127.0.0.1:0", LineUnix: path})
	for _, addr := range []string{"unixgram://" + path, "udp://" + in.Addrs().LineUDP} {
		t.Run(addr[:strings.Index(addr, ":")], func(t *testing.T) {
			c, err := client.New(client.Config{Addr: addr, Service: "billy"})
			if err != nil {
				t.Fatal(err)
			}
			var want []sent
			for i := range 1000 {
				s := sent{
					Endpoint: fmt.Sprintf("/search/%d", i%7),
					Latency:  time.Duration(1000+i*997) * time.Microsecond,
					Status:   []string{"200", "503", "OK", "ERROR"}[i%4],
				}
				if i%3 != 0 {
					s.TraceID = [16]byte{byte(i), byte(i >> 8), 0xab, 15: 1}
				}
				if i%5 != 0 {
					s.ThreadID = uint32(20000 + i)
				}
				want = append(want, s)
				c.Record(s.Endpoint, s.Latency, s.Status, s.TraceID, s.ThreadID)
			}
			// Odd names: spaces become '_', empties get a stand-in.
			c.Record("/with space\tand tab", 1500*time.Nanosecond, "", [16]byte{}, 0)
			want = append(want, sent{Endpoint: "/with_space_and_tab", Latency: time.Microsecond, Status: "UNSET"})
			before := time.Now()
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if d := c.Dropped(); d != 0 {
				t.Errorf("Dropped() = %d, want 0", d)
			}
			got := make([]sent, 0, len(want))
			received := collectUntil(in, len(want), 10*time.Second)
			if len(received) == 0 || (addr[:3] != "udp" && len(received) < len(want)) {
				t.Fatalf("got %d of %d requests", len(received), len(want))
			}
			if addr[:3] == "udp" && len(received) < len(want) {
				// UDP may drop a datagram under load, even on loopback;
				// what arrives must still be exactly what was sent.
				t.Logf("udp: %d of %d requests arrived (a datagram was dropped)", len(received), len(want))
			}
			for _, r := range received {
				if r.Service != "billy" || r.Weight != 1 {
					t.Errorf("service %q weight %d, want billy 1", r.Service, r.Weight)
				}
				if end := r.Start.Add(r.Duration); end.After(time.Now()) || end.Before(before.Add(-time.Second)) {
					t.Errorf("request ends at %s, want the receive time", end)
				}
				got = append(got, sent{r.Endpoint, r.Duration, r.Status, r.TraceID, r.ThreadID})
			}
			byLatency := func(s []sent) {
				sort.Slice(s, func(i, j int) bool { return s[i].Latency < s[j].Latency })
			}
			byLatency(want)
			byLatency(got)
			if len(got) < len(want) {
				want = keepReceived(want, got)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAgentAbsentThenPresent: with no agent, Record neither blocks nor
// errs, and everything is counted as dropped; when the agent comes up,
// the client finds it on its next flush.
func TestAgentAbsentThenPresent(t *testing.T) {
	path := socketPath(t)
	c, err := client.New(client.Config{Addr: "unixgram://" + path, Service: "billy", QueueSize: 1024, FlushInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 100_000
	start := time.Now()
	for range n {
		c.Record("/search", time.Millisecond, "200", [16]byte{}, 0)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("%d Records without an agent took %s", n, d)
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.Dropped() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := c.Dropped(); got != n {
		t.Fatalf("Dropped() = %d, want %d", got, n)
	}

	in := startAgent(t, intake.Config{LineUnix: path})
	deadline = time.Now().Add(5 * time.Second)
	for len(in.Out()) == 0 && time.Now().Before(deadline) {
		c.Record("/search", time.Millisecond, "200", [16]byte{}, 0)
		time.Sleep(20 * time.Millisecond)
	}
	if len(in.Out()) == 0 {
		t.Fatal("the client did not find the agent that came up")
	}
}

func TestCloseFlushesAndLaterRecordsAreDropped(t *testing.T) {
	path := socketPath(t)
	in := startAgent(t, intake.Config{LineUnix: path})
	c, err := client.New(client.Config{Addr: "unixgram://" + path, Service: "billy", FlushInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	c.Record("/a", time.Millisecond, "200", [16]byte{}, 0)
	c.Close() // well before the flush interval
	collect(t, in, 1)
	c.Record("/b", time.Millisecond, "200", [16]byte{}, 0)
	if got := c.Dropped(); got != 1 {
		t.Errorf("Dropped() after a Record past Close = %d, want 1", got)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  client.Config
		want string
	}{
		{client.Config{Addr: "tcp://127.0.0.1:7171", Service: "billy"}, "want unixgram:///path/to/agent.sock or udp://host:port"},
		{client.Config{Addr: "udp://127.0.0.1", Service: "billy"}, "want unixgram"},
		{client.Config{Addr: "unixgram://", Service: "billy"}, "want unixgram"},
		{client.Config{Addr: "udp://127.0.0.1:7171"}, "Service is empty"},
		{client.Config{Addr: "udp://127.0.0.1:7171", Service: "bil ly"}, "without spaces"},
		{client.Config{Addr: "udp://127.0.0.1:7171", Service: "billy", MaxDatagram: 100}, "MaxDatagram = 100"},
		{client.Config{Addr: "udp://127.0.0.1:7171", Service: "billy", MaxDatagram: 65536}, "MaxDatagram = 65536, want 1024–65507"},
	} {
		_, err := client.New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
}

// datagramSink is a unix datagram socket that counts what it receives.
type datagramSink struct {
	mu               sync.Mutex
	datagrams, lines int
}

func newDatagramSink(t *testing.T) (*datagramSink, string) {
	path := socketPath(t)
	pc, err := net.ListenPacket("unixgram", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	s := &datagramSink{}
	go func() {
		buf := make([]byte, 1<<16)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.datagrams++
			s.lines += strings.Count(string(buf[:n]), "\n")
			s.mu.Unlock()
		}
	}()
	return s, path
}

func (s *datagramSink) counts() (datagrams, lines int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.datagrams, s.lines
}

// waitFor polls until the sink has want datagrams, or fails.
func (s *datagramSink) waitFor(t *testing.T, want int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if d, _ := s.counts(); d >= want {
			return
		}
	}
	d, l := s.counts()
	t.Fatalf("received %d datagrams (%d lines), want %d", d, l, want)
}

// A full datagram waits for the flush, so that the datagrams of one flush
// reach the agent back to back; four full ones go at once.
func TestFullDatagramsWaitForTheFlush(t *testing.T) {
	sink, path := newDatagramSink(t)
	c, err := client.New(client.Config{Addr: "unixgram://" + path, Service: "billy", FlushInterval: time.Minute, MaxDatagram: 1024})
	if err != nil {
		t.Fatal(err)
	}
	const perDatagram = 1024 / len("billy /a 1000 200\n") // 56 lines
	record := func(n int) {
		for range n {
			c.Record("/a", time.Millisecond, "200", [16]byte{}, 0)
		}
	}
	record(2*perDatagram + 10) // two full datagrams and part of a third
	time.Sleep(100 * time.Millisecond)
	if d, _ := sink.counts(); d != 0 {
		t.Fatalf("%d datagrams sent before the flush, want none", d)
	}
	record(2*perDatagram + 10) // four full, part of a fifth
	sink.waitFor(t, 4)
	time.Sleep(100 * time.Millisecond)
	if d, l := sink.counts(); d != 4 || l != 4*perDatagram {
		t.Fatalf("after four full datagrams: %d datagrams, %d lines; want 4 and %d", d, l, 4*perDatagram)
	}
	c.Close()
	sink.waitFor(t, 5)
	if d, l := sink.counts(); d != 5 || l != 4*perDatagram+20 || c.Dropped() != 0 {
		t.Fatalf("after Close: %d datagrams, %d lines, %d dropped; want 5, %d, 0", d, l, c.Dropped(), 4*perDatagram+20)
	}
}
