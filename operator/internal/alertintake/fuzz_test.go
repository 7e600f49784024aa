package alertintake

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/tests/fakeclock"
)

// checkAlert asserts what every Alert from untrusted bytes must satisfy.
func checkAlert(t *testing.T, src Source, a Alert) {
	t.Helper()
	if a.Source != src || !strings.HasPrefix(a.Key, string(src)+"/") {
		t.Fatalf("source %q, key %q from a %s decoder", a.Source, a.Key, src)
	}
	if a.Service == "" {
		t.Fatalf("an alert without a service: %+v", a)
	}
	if _, ok := cleanClass(string(a.PatternClass)); !ok {
		t.Fatalf("pattern class %q", a.PatternClass)
	}
	for _, v := range []string{a.Service, a.RawID} {
		if c, ok := cleanValue(v); !ok || c != v {
			t.Fatalf("value %q is not clean", v)
		}
	}
	for _, list := range [][]string{a.Hosts, a.HWClasses} {
		for i, v := range list {
			if c, ok := cleanValue(v); !ok || c != v || v == "" {
				t.Fatalf("list value %q is empty or not clean", v)
			}
			if slices.Index(list, v) != i {
				t.Fatalf("value %q repeated in %q", v, list)
			}
		}
	}
	if !a.ReceivedAt.Equal(received) {
		t.Fatalf("received at %s", a.ReceivedAt)
	}
}

func addTestdataSeeds(f *testing.F, names ...string) {
	for _, n := range names {
		f.Add(readTestdata(f, n))
	}
}

func FuzzDecodeDetectorAlert(f *testing.F) {
	addTestdataSeeds(f, "spike_group.json", "pattern.json", "grafana.json")
	f.Add([]byte(`{"schema": "spikehunt.alert/v2"}`))
	f.Add([]byte(`{"schema": "spikehunt.alert/v1", "alert_id": "pattern-0123456789abcdef0123456789abcdef", "kind": "pattern", "service": "s",
		"pattern": {"change": "new", "class": "isolated-host", "hw_class_skew": {"a": 1e308, "b": -0}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, skip, err := decodeDetectorAlert(data, received)
		if err != nil {
			if r := reasonOf(err); r != rejectBadJSON && r != rejectUnknownSchema && r != rejectInvalid {
				t.Fatalf("reason %q for %v", r, err)
			}
			return
		}
		if skip != "" {
			if skip != skipResolved || !cmp.Equal(a, Alert{}) {
				t.Fatalf("skip %q with %+v", skip, a)
			}
			return
		}
		checkAlert(t, SourceKafka, a)
		if a.Key != "kafka/"+a.RawID || !alertIDPattern.MatchString(a.RawID) {
			t.Fatalf("key %q, raw id %q", a.Key, a.RawID)
		}
		if !a.WindowEnd.IsZero() && a.WindowEnd.Before(a.WindowStart) {
			t.Fatalf("window %s–%s", a.WindowStart, a.WindowEnd)
		}
	})
}

func fuzzNotification(f *testing.F, src Source, decode func([]byte, time.Time) ([]Alert, map[string]int, error)) {
	f.Fuzz(func(t *testing.T, body []byte) {
		alerts, skipped, err := decode(body, received)
		if err != nil {
			if alerts != nil || skipped != nil || reasonOf(err) != rejectMalformed {
				t.Fatalf("error %v with %d alerts, skipped %v", err, len(alerts), skipped)
			}
			return
		}
		for _, a := range alerts {
			checkAlert(t, src, a)
		}
		for reason, n := range skipped {
			if n <= 0 || (reason != skipResolved && reason != skipNoService && reason != skipInvalidLabels) {
				t.Fatalf("skipped %v", skipped)
			}
		}
		again, _, _ := decode(body, received)
		if diff := cmp.Diff(alerts, again); diff != "" {
			t.Fatalf("decoding twice differs (-first +second):\n%s", diff)
		}
	})
}

func FuzzDecodeGrafana(f *testing.F) {
	addTestdataSeeds(f, "grafana.json", "alertmanager.json")
	f.Add([]byte(`{"version": "1", "alerts": [{"status": "firing", "labels": {"service": "a", "host": ",,a, a,b"}}]}`))
	fuzzNotification(f, SourceGrafana, decodeGrafana)
}

func FuzzDecodeAlertmanager(f *testing.F) {
	addTestdataSeeds(f, "alertmanager.json", "grafana.json")
	f.Add([]byte(`{"version": "4", "alerts": [{"status": "firing", "labels": {"service": "a", "pattern_class": "x-"}, "startsAt": "0001-01-01T00:00:00Z"}]}`))
	fuzzNotification(f, SourceAlertmanager, decodeAlertmanager)
}

// FuzzGrafanaSignedRequest drives the whole Grafana endpoint with bodies
// signed the way Grafana signs them, at a fuzzed clock skew: inside the
// window a request is 202 (exactly decodeGrafana's alerts emitted), 400 or
// 413; outside it 401; and nothing is emitted unless 202.
func FuzzGrafanaSignedRequest(f *testing.F) {
	addTestdataSeeds(f, "grafana.json")
	f.Add([]byte(`{"version": "1", "alerts": []}`))
	f.Add([]byte(`{"version": "1", "alerts": [{"status": "firing", "labels": {"service": "\u0000"}}]}`))
	dir := f.TempDir()
	clock := fakeclock.New(time.Time{})
	sink := &recordingSink{}
	wh, err := NewWebhook(WebhookConfig{
		TLSCertFile: "unused", TLSKeyFile: "unused", MaxBodyBytes: 64 << 10, Clock: clock,
		Grafana: &GrafanaConfig{Secret: SecretSource{File: writeFile(f, dir, "hmac", testHMACSecret)}},
	}, sink, nil)
	if err != nil {
		f.Fatal(err)
	}
	h := wh.Handler()
	var tick atomic.Int64
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, skew := range []time.Duration{0, -DefaultReplayWindow, DefaultReplayWindow + time.Second} {
			// A clock that moves on keeps the fuzzer's repeated inputs from
			// being refused as replays.
			now := received.Add(time.Duration(tick.Add(1)) * time.Hour)
			clock.Set(now)
			sink.reset()
			stamp := strconv.FormatInt(now.Add(skew).Unix(), 10)
			m := hmac.New(sha256.New, []byte(testHMACSecret))
			m.Write([]byte(stamp + ":"))
			m.Write(body)
			req := httptest.NewRequest(http.MethodPost, DefaultGrafanaPath, bytes.NewReader(body))
			req.Header.Set(DefaultSignatureHeader, hex.EncodeToString(m.Sum(nil)))
			req.Header.Set(DefaultTimestampHeader, stamp)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			got, _ := sink.alerts()
			want, _, derr := decodeGrafana(body, now)
			switch {
			case skew > DefaultReplayWindow:
				if rec.Code != http.StatusUnauthorized {
					t.Fatalf("skew %s: status %d, want 401", skew, rec.Code)
				}
			case len(body) > 64<<10:
				if rec.Code != http.StatusRequestEntityTooLarge {
					t.Fatalf("status %d for %d bytes, want 413", rec.Code, len(body))
				}
			case derr != nil:
				if rec.Code != http.StatusBadRequest {
					t.Fatalf("status %d for a body decodeGrafana refuses (%v), want 400", rec.Code, derr)
				}
			default:
				if rec.Code != http.StatusAccepted {
					t.Fatalf("status %d (%s) for a valid signed body, want 202", rec.Code, rec.Body)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("emitted (-decoded +emitted):\n%s", diff)
				}
				continue
			}
			if len(got) != 0 {
				t.Fatalf("status %d emitted %+v", rec.Code, got)
			}
		}
	})
}
