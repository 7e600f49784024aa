package alerts

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spikehunt/spikehunt/internal/alertdoc"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
	"github.com/spikehunt/spikehunt/tests/fakeclock"
)

// flakySink refuses while down is set, and passes the rest to a MemorySink.
type flakySink struct {
	MemorySink
	down bool
}

func (s *flakySink) Send(ctx context.Context, alerts []alertdoc.Alert) error {
	if s.down {
		return errors.New("broker unreachable")
	}
	return s.MemorySink.Send(ctx, alerts)
}

func TestAlertPublisherCountsAndRetries(t *testing.T) {
	f := newFleet()
	clock := fakeclock.New(f.t0)
	sink := &flakySink{}
	p, err := NewPublisher(Config{Clock: clock, SpikeGroupsPerMinute: 1, SpikeGroupBurst: 1}, sink)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := p.Register(reg); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Every pass sees the pattern, unchanged after the first: it is
	// announced once.
	pattern := []detect.Pattern{f.pattern("billy", 40)}
	publish := func(pass Pass) []alertdoc.Alert {
		t.Helper()
		pass.Patterns = pattern
		sent, err := p.Publish(ctx, pass)
		if err != nil {
			t.Fatal(err)
		}
		return sent
	}

	if sent := publish(Pass{NewSpikes: f.windows("billy", 0, "h1")}); len(sent) != 2 {
		t.Fatalf("first pass sent %d", len(sent))
	}
	clock.Advance(10 * time.Second)
	if sent := publish(Pass{NewSpikes: f.windows("billy", 10*time.Second, "h2")}); len(sent) != 0 {
		t.Fatalf("rate-limited pass sent %d", len(sent))
	}

	// The sink is down when the token comes back: the alert waits in the
	// outbox, and goes out, once, when the sink is back.
	sink.down = true
	clock.Advance(time.Minute)
	if _, err := p.Publish(ctx, Pass{Patterns: pattern}); err == nil || !strings.Contains(err.Error(), "kept for the next pass") {
		t.Fatalf("want the send error, got %v", err)
	}
	if n := len(p.State().Outbox); n != 1 {
		t.Fatalf("outbox holds %d alerts, want 1", n)
	}
	sink.down = false
	clock.Advance(time.Second)
	sent := publish(Pass{})
	if len(sent) != 1 || sent[0].SpikeGroup == nil || sent[0].SpikeGroup.SuppressedAlerts != 1 {
		t.Fatalf("after the outage: %+v", sent)
	}
	if sent := publish(Pass{}); len(sent) != 0 {
		t.Fatalf("an empty pass sent %d", len(sent))
	}
	if n := len(sink.Alerts()); n != 3 {
		t.Errorf("the sink has %d alerts, want 3", n)
	}

	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"published spike-group", testutil.ToFloat64(p.metrics.published.WithLabelValues(alertdoc.KindSpikeGroup)), 2},
		{"published pattern", testutil.ToFloat64(p.metrics.published.WithLabelValues(alertdoc.KindPattern)), 1},
		{"suppressed rate_limited", testutil.ToFloat64(p.metrics.suppressed.WithLabelValues(ReasonRateLimited)), 1},
		{"send errors", testutil.ToFloat64(p.metrics.errors), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "spikehunt_alerts_published_total", "spikehunt_alerts_suppressed_total"); err != nil || n != 6 {
		t.Errorf("series: %d, %v (want 2 kinds + 4 reasons)", n, err)
	}
}

func TestAlertPublisherOutboxIsBounded(t *testing.T) {
	f := newFleet()
	clock := fakeclock.New(f.t0)
	sink := &flakySink{down: true}
	p, err := NewPublisher(Config{Clock: clock, MaxOutbox: 2}, sink)
	if err != nil {
		t.Fatal(err)
	}
	for i, svc := range []string{"a", "b", "c"} {
		clock.Advance(time.Second)
		p.Publish(context.Background(), Pass{NewSpikes: f.windows(svc, time.Duration(i)*time.Second, "h1")})
	}
	out := p.State().Outbox
	if len(out) != 2 || out[0].Service != "b" || out[1].Service != "c" {
		t.Errorf("outbox: %+v", out)
	}
	if got := testutil.ToFloat64(p.metrics.suppressed.WithLabelValues(ReasonOverflow)); got != 1 {
		t.Errorf("overflow = %v, want 1", got)
	}
}

func TestAlertNewPublisherNeedsASink(t *testing.T) {
	if _, err := NewPublisher(Config{}, nil); err == nil {
		t.Error("no error without a sink")
	}
	if _, err := NewPublisher(Config{SpikeGroupBurst: -1}, &MemorySink{}); err == nil {
		t.Error("no error for a bad config")
	}
}
