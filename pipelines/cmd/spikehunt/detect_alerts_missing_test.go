package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/pipelines/lab/sim"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// spikehunt detect --every with an alerts topic that does not exist: the
// passes go on and their windows are stored, /healthz answers 200 with
// "degraded: alerts: …" naming the topic, the gauge is 1, and once the
// topic is created the alerts kept meanwhile are sent and it says ok.
func TestDetectGoesOnWithoutTheAlertsTopic(t *testing.T) {
	ctx := context.Background()
	st := testenv.ClickHouse(t)
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	cfg := sim.Config{Scenario: sim.ThousandSpikes, Hosts: 20, Duration: time.Hour, Start: start, Seed: 9, CounterStep: 30 * time.Second}
	if _, _, err := sim.Load(ctx, st, cfg, nil, nil); err != nil {
		t.Fatal(err)
	}
	k := testenv.SharedKafka(t)
	topic := "alerts-missing-" + strings.ToLower(t.Name())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	rctx, cancel := context.WithCancel(ctx)
	var out, errs bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(rctx, []string{"detect", "--dsn", "chdb://" + st.Dir() + "?database=" + st.Database(), "--service", "checkout",
			"--from", start.Format(time.RFC3339), "--to", start.Add(time.Hour).Format(time.RFC3339), "--every", "1s",
			"--lookback", "1h", "--alerts.kafka.brokers", k.Brokers()[0], "--alerts.topic", topic, "--alerts.allow-unsigned",
			"--alerts.state", filepath.Join(t.TempDir(), "alerts.json"), "--listen", addr}, &out, &errs)
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if code := <-done; code != 0 {
				t.Errorf("detect: exit %d\n%s", code, errs.String())
			}
		}
	}
	t.Cleanup(stop)

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(90 * time.Second); !ok(); time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				code, body := get("/healthz")
				t.Fatalf("%s: never; /healthz %d %q\nstderr:\n%s", what, code, body, errs.String())
			}
		}
	}
	waitFor("/healthz degraded naming the alerts topic", func() bool {
		code, body := get("/healthz")
		return code == http.StatusOK && strings.HasPrefix(body, "degraded: alerts: ") && strings.Contains(body, topic)
	})
	if _, m := get("/metrics"); !strings.Contains(m, "spikehunt_detect_alerts_topic_missing 1") {
		t.Errorf("/metrics lacks spikehunt_detect_alerts_topic_missing 1")
	}
	// Detection and the store go on.
	tab, err := store.Select(ctx, st, "SELECT count() > 0 FROM spikes WHERE service = 'checkout'")
	if err != nil {
		t.Fatal(err)
	}
	if tab.Rows[0][0] != "1" {
		t.Errorf("no spike windows stored while the alerts topic is missing")
	}

	if err := k.CreateTopic(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	waitFor("/healthz ok once the topic exists", func() bool {
		code, body := get("/healthz")
		return code == http.StatusOK && body == "ok\n"
	})
	if _, m := get("/metrics"); !strings.Contains(m, "spikehunt_detect_alerts_topic_missing 0") {
		t.Errorf("/metrics lacks spikehunt_detect_alerts_topic_missing 0 once the topic exists")
	}
	stop()
	if n := len(readTopic(t, k, topic)); n == 0 {
		t.Errorf("no alerts on %s once it exists: the kept ones were not sent", topic)
	}
	if !strings.Contains(out.String(), "alert(s) published") {
		t.Errorf("stdout does not say alerts were published:\n%s", out.String())
	}
}
