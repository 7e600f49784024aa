package intake

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spikehunt/spikehunt/tests/fakeclock"
)

// recordLog keeps every record logged through it.
type recordLog struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *recordLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *recordLog) WithGroup(string) slog.Handler            { return l }
func (l *recordLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}

// malformed returns the attributes of each record that reports a
// malformed line, by its reason.
func (l *recordLog) malformed() map[string][]map[string]slog.Value {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]map[string]slog.Value{}
	for _, r := range l.recs {
		attrs := map[string]slog.Value{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.Resolve(); return true })
		if reason, ok := attrs["reason"]; ok && attrs["sample"].Kind() != slog.KindAny {
			out[reason.String()] = append(out[reason.String()], attrs)
		}
	}
	return out
}

func TestABurstOfMalformedLinesLogsOneSampleLinePerReasonAMinuteAndCountsTheRest(t *testing.T) {
	cfg := testConfig(t)
	clock := fakeclock.New(time.Now())
	logs := &recordLog{}
	in, err := New(cfg, slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	in.now = clock.Now
	t.Cleanup(func() { in.Close() })
	if err := in.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// 5,000 lines of each reason; the latency one carries a terminal
	// escape and is long, as hostile input would be.
	badLatency := "billy /search \x1b[2J" + strings.Repeat("9", 400) + " 200"
	badFields := "billy /search"
	var lines []string
	for range 5000 {
		lines = append(lines, badLatency, badFields)
	}
	sendLines(t, "unixgram", cfg.LineUnix, lines, 100)
	waitDrops := func(reason string, want float64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for testutil.ToFloat64(in.m.drops.WithLabelValues(SourceUnixgram, reason)) < want {
			if time.Now().After(deadline) {
				t.Fatalf("drops{%s} = %v, want %v", reason, testutil.ToFloat64(in.m.drops.WithLabelValues(SourceUnixgram, reason)), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitDrops("latency", 5000)
	waitDrops("fields", 5000)

	got := logs.malformed()
	for _, reason := range []string{"latency", "fields"} {
		if len(got[reason]) != 1 {
			t.Fatalf("%d log lines for reason %s after the burst, want 1: %v", len(got[reason]), reason, got[reason])
		}
		a := got[reason][0]
		sample := a["sample"].String()
		if strings.ContainsAny(sample, "\x1b\n\r") {
			t.Errorf("reason %s: sample %q holds raw control bytes", reason, sample)
		}
		if len(sample) > 200 {
			t.Errorf("reason %s: sample is %d bytes, want it truncated", reason, len(sample))
		}
		if !strings.Contains(sample, "billy /search") {
			t.Errorf("reason %s: sample %q does not show the line", reason, sample)
		}
		if n := a["suppressed"].Int64(); n != 0 {
			t.Errorf("reason %s: first line says %d suppressed, want 0", reason, n)
		}
	}
	if s := got["latency"][0]["sample"].String(); !strings.Contains(s, `\x1b`) {
		t.Errorf("latency sample %q does not show the escape byte escaped", s)
	}

	// Within the minute: still nothing more.
	clock.Advance(30 * time.Second)
	sendLines(t, "unixgram", cfg.LineUnix, []string{badLatency, badFields}, 2)
	waitDrops("latency", 5001)
	waitDrops("fields", 5001)
	if got := logs.malformed(); len(got["latency"]) != 1 || len(got["fields"]) != 1 {
		t.Fatalf("logged again within the minute: %v", got)
	}

	// The next minute: one line per reason, with the lines it did not log.
	clock.Advance(31 * time.Second)
	sendLines(t, "unixgram", cfg.LineUnix, []string{badLatency, badFields}, 2)
	waitDrops("latency", 5002)
	waitDrops("fields", 5002)
	got = logs.malformed()
	for _, reason := range []string{"latency", "fields"} {
		if len(got[reason]) != 2 {
			t.Fatalf("%d log lines for reason %s after a minute, want 2", len(got[reason]), reason)
		}
		if n := got[reason][1]["suppressed"].Int64(); n != 5000 {
			t.Errorf("reason %s: second line says %d suppressed, want 5000 (4999 of the burst and 1 within the minute)", reason, n)
		}
	}
}
