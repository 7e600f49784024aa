package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// selfSeen is what one host's agent sent about itself.
type selfSeen struct {
	drops       map[string]float64 // by reason
	records     map[string]float64 // by signal
	spool       int                // spool gauge points
	capActive   []float64
	capBudget   []float64
	badInterval int // deltas outside 0.5–5 s
}

// consumeSelf reads the agent figures host sent to otlp_metrics until done
// says so or the timeout.
func consumeSelf(t *testing.T, k *testenv.Kafka, host string, done func(*selfSeen) bool, timeout time.Duration) *selfSeen {
	t.Helper()
	cl, err := k.Client(kgo.ConsumeTopics("otlp_metrics"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	s := &selfSeen{drops: map[string]float64{}, records: map[string]float64{}}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && !done(s) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) != host {
				return
			}
			md, err := (&pmetric.ProtoUnmarshaler{}).UnmarshalMetrics(r.Value)
			if err != nil {
				t.Errorf("undecodable metric message: %v", err)
				return
			}
			ms := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
			for i := range ms.Len() {
				m := ms.At(i)
				var dps pmetric.NumberDataPointSlice
				if m.Type() == pmetric.MetricTypeSum {
					dps = m.Sum().DataPoints()
				} else {
					dps = m.Gauge().DataPoints()
				}
				for j := range dps.Len() {
					dp := dps.At(j)
					if m.Type() == pmetric.MetricTypeSum {
						if d := dp.Timestamp().AsTime().Sub(dp.StartTimestamp().AsTime()); d < 500*time.Millisecond || d > 5*time.Second {
							s.badInterval++
						}
					}
					switch m.Name() {
					case telemetry.MetricRequestsDropped:
						r, _ := dp.Attributes().Get(telemetry.AttrDropReason)
						s.drops[r.Str()] += dp.DoubleValue()
					case telemetry.MetricExportRecords:
						sig, _ := dp.Attributes().Get(telemetry.AttrSignal)
						s.records[sig.Str()] += dp.DoubleValue()
					case telemetry.MetricSpoolBytes:
						s.spool++
					case telemetry.MetricCaptureActive:
						s.capActive = append(s.capActive, dp.DoubleValue())
					case telemetry.MetricCaptureMaxConcurrent:
						s.capBudget = append(s.capBudget, dp.DoubleValue())
					}
				}
			}
		})
	}
	return s
}

// scrape reads the samples of family from the agent's /metrics, summed by
// the value of label.
func scrape(t *testing.T, p *agentProc, family, label string) map[string]float64 {
	t.Helper()
	m := metricsAddr.FindStringSubmatch(p.out.String())
	if m == nil {
		t.Fatalf("no metrics address in the agent's output:\n%s", p.out.String())
	}
	resp, err := http.Get("http://" + m[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, family+"{") {
			continue
		}
		labels, value, _ := strings.Cut(line[len(family)+1:], "} ")
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		for _, kv := range strings.Split(labels, ",") {
			if k, val, _ := strings.Cut(kv, "="); k == label {
				out[strings.Trim(val, `"`)] += v
			}
		}
	}
	return out
}

// An agent whose intake queue is full drops requests, and the drops it
// reports in its own metric stream add up, by reason, to its Prometheus
// drop counter; beside them go its export records, its spool backlog and
// its capture budget.
func TestAgentReportsItsDropsInItsMetricStream(t *testing.T) {
	k := testenv.SharedKafka(t)
	cfg := filepath.Join(t.TempDir(), "agent.yaml")
	// A queue of one request: a burst overflows it between two drains.
	if err := os.WriteFile(cfg, []byte("intake:\n  queue_size: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	host := fmt.Sprintf("drops-node-%d", time.Now().UnixNano())
	p := startAgent(t, k.Brokers(), t.TempDir(), "--config", cfg, "--host-name", host)
	var lines []string
	for i := range 20_000 {
		lines = append(lines, fmt.Sprintf("billy /get %d 200 %s 7", 1000+i%50, traceID(i)))
	}
	sendLines(t, p.sock, lines)
	// Two sampling passes after the burst: every drop is in a pass.
	time.Sleep(2500 * time.Millisecond)
	prom := scrape(t, p, "spikehunt_intake_drops_total", "reason")
	if prom["queue_full"] == 0 {
		t.Fatalf("no queue_full drops from a burst of %d into a queue of 1: %v", len(lines), prom)
	}
	equal := func(s *selfSeen) bool {
		for r, v := range prom {
			if s.drops[r] != v {
				return false
			}
		}
		return len(s.capBudget) > 0
	}
	s := consumeSelf(t, k, host, equal, 30*time.Second)
	t.Logf("/metrics drops %v; metric stream: drops %v, export records %v, %d spool points, captures %v of %v",
		prom, s.drops, s.records, s.spool, s.capActive, s.capBudget)
	for r, v := range prom {
		if s.drops[r] != v {
			t.Errorf("drops %s: %v in the metric stream, %v on /metrics", r, s.drops[r], v)
		}
	}
	if len(s.drops) != len(prom) {
		t.Errorf("drop reasons %v in the metric stream, %v on /metrics", s.drops, prom)
	}
	if s.records["spans"] == 0 || s.records["metrics"] == 0 || s.spool == 0 {
		t.Errorf("export records %v, %d spool points", s.records, s.spool)
	}
	for i := range s.capBudget {
		if s.capBudget[i] != 2 || s.capActive[i] != 0 {
			t.Fatalf("captures %v of %v, want 0 of 2", s.capActive, s.capBudget)
		}
	}
	if s.badInterval > 0 {
		t.Errorf("%d deltas with an interval outside 0.5–5 s", s.badInterval)
	}
	p.stop(t)
}
