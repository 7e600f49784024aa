package intake

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// testConfig enables every receiver on ephemeral ports and a unix socket
// in a short temporary directory (sun_path holds 108 bytes).
func testConfig(t testing.TB) Config {
	dir, err := os.MkdirTemp("", "shi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return Config{
		OTLPGRPC:    "127.0.0.1:0",
		OTLPHTTP:    "127.0.0.1:0",
		LineUDP:     "127.0.0.1:0",
		LineUnix:    filepath.Join(dir, "agent.sock"),
		SampleEvery: 1,
		// Every request: no per-second budget.
		SampledPerSecond: -1,
	}
}

// startIntake builds and starts an intake; setup may change it before
// Start (its clock, say). Close runs at cleanup.
func startIntake(t testing.TB, cfg Config, setup ...func(*Intake)) *Intake {
	t.Helper()
	in, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	for _, f := range setup {
		f(in)
	}
	t.Cleanup(func() { in.Close() })
	if err := in.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return in
}

// collect reads n requests from Out, failing after timeout.
func collect(t testing.TB, in *Intake, n int, timeout time.Duration) []telemetry.Request {
	t.Helper()
	got := make([]telemetry.Request, 0, n)
	deadline := time.After(timeout)
	for len(got) < n {
		select {
		case r, ok := <-in.Out():
			if !ok {
				t.Fatalf("Out closed after %d of %d requests", len(got), n)
			}
			got = append(got, r)
		case <-deadline:
			t.Fatalf("got %d of %d requests within %s", len(got), n, timeout)
		}
	}
	return got
}

// expectNoMore fails if a request arrives within d.
func expectNoMore(t testing.TB, in *Intake, d time.Duration) {
	t.Helper()
	select {
	case r := <-in.Out():
		t.Fatalf("unexpected request %+v", r)
	case <-time.After(d):
	}
}

func drops(in *Intake, source, reason string) float64 {
	return testutil.ToFloat64(in.m.drops.WithLabelValues(source, reason))
}

func outcomes(in *Intake, source, outcome string) float64 {
	return testutil.ToFloat64(in.m.requests.WithLabelValues(source, outcome))
}

// received is every request a source has classified.
func received(in *Intake, source string) float64 {
	var n float64
	for _, o := range outcomeNames {
		n += outcomes(in, source, o)
	}
	return n
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sendDatagram writes one datagram to a line receiver.
func sendDatagram(t testing.TB, network, addr string, payload []byte) {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(payload); err != nil {
		t.Fatalf("write %s %s: %v", network, addr, err)
	}
}

func testutilIgnored(in *Intake, source string) float64 {
	return testutil.ToFloat64(in.m.ignored.WithLabelValues(source))
}

func testutilOverflow(in *Intake, kind string) float64 {
	return testutil.ToFloat64(in.m.overflow.WithLabelValues(kind))
}
