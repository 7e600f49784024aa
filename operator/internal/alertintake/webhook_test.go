package alertintake

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spikehunt/spikehunt/tests/fakeclock"
)

const (
	testHMACSecret = "grafana-hmac-secret-0123456789"
	testToken      = "alertmanager-token-0123456789"
)

var testNow = time.Date(2025, 6, 1, 12, 0, 40, 0, time.UTC) // fixed date: the webhook's fake clock; it sends to a recording sink

// webhookFixture is a Webhook behind an httptest TLS server, with a
// recording sink and a fake clock.
type webhookFixture struct {
	wh     *Webhook
	srv    *httptest.Server
	sink   *recordingSink
	clock  *fakeclock.Clock
	client *http.Client
}

func newWebhookFixture(t *testing.T, edit func(*WebhookConfig)) *webhookFixture {
	t.Helper()
	dir := t.TempDir()
	f := &webhookFixture{sink: &recordingSink{}, clock: fakeclock.New(testNow)}
	cfg := WebhookConfig{
		// httptest serves TLS with its own certificate; Serve is tested below.
		TLSCertFile: "unused.crt", TLSKeyFile: "unused.key",
		MaxBodyBytes: 4 << 10,
		Grafana:      &GrafanaConfig{Secret: SecretSource{File: writeFile(t, dir, "hmac", testHMACSecret+"\n")}},
		Alertmanager: &AlertmanagerConfig{Token: SecretSource{File: writeFile(t, dir, "token", testToken)}},
		Clock:        f.clock,
	}
	if edit != nil {
		edit(&cfg)
	}
	wh, err := NewWebhook(cfg, f.sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.wh = wh
	f.srv = httptest.NewTLSServer(wh.Handler())
	t.Cleanup(f.srv.Close)
	f.client = f.srv.Client()
	return f
}

// grafanaRequest is a request as Grafana's contact point sends it, signed
// with secret at ts. Tests then spoil one part of it.
func (f *webhookFixture) grafanaRequest(t *testing.T, body []byte, secret string, ts time.Time) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+DefaultGrafanaPath, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	stamp := strconv.FormatInt(ts.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(stamp + ":"))
	m.Write(body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(DefaultSignatureHeader, hex.EncodeToString(m.Sum(nil)))
	req.Header.Set(DefaultTimestampHeader, stamp)
	return req
}

func (f *webhookFixture) alertmanagerRequest(t *testing.T, body []byte, authorization string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+DefaultAlertmanagerPath, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	return req
}

func (f *webhookFixture) do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// expectRefused checks a refusal: its status, its reason counted once and
// alone, and nothing handed to the sink.
func (f *webhookFixture) expectRefused(t *testing.T, ep Source, status int, gotStatus int, body, reason string) {
	t.Helper()
	if gotStatus != status {
		t.Errorf("status %d (%s), want %d", gotStatus, strings.TrimSpace(body), status)
	}
	if got, n := f.sink.alerts(); n != 0 {
		t.Errorf("the sink got %d calls (%+v) from a refused request", n, got)
	}
	if n := testutil.CollectAndCount(f.wh.metrics.rejected); n != 1 {
		t.Errorf("%d rejected series, want 1", n)
	}
	if got := testutil.ToFloat64(f.wh.metrics.rejected.WithLabelValues(string(ep), reason)); got != 1 {
		t.Errorf("rejected{%s, %s} = %v, want 1 (body %q)", ep, reason, got, body)
	}
	if got := testutil.ToFloat64(f.wh.metrics.accepted.WithLabelValues(string(ep))); got != 0 {
		t.Errorf("accepted{%s} = %v, want 0", ep, got)
	}
}

func TestGrafanaWebhookAcceptsASignedNotification(t *testing.T) {
	f := newWebhookFixture(t, nil)
	body := readTestdata(t, "grafana.json")
	status, resp := f.do(t, f.grafanaRequest(t, body, testHMACSecret, testNow.Add(-3*time.Second)))
	if status != http.StatusAccepted {
		t.Fatalf("status %d (%s), want 202", status, resp)
	}
	want, _, err := decodeGrafana(body, testNow)
	if err != nil {
		t.Fatal(err)
	}
	got, calls := f.sink.alerts()
	if calls != 1 || len(got) != 1 || got[0].Key != want[0].Key || got[0].Service != "billy" || got[0].PatternClass != FleetRecurrent {
		t.Errorf("sink got %d calls with %+v, want one call with %+v", calls, got, want)
	}
	if resp != "accepted 1 alerts, skipped 2\n" {
		t.Errorf("response %q", resp)
	}
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"accepted", testutil.ToFloat64(f.wh.metrics.accepted.WithLabelValues("grafana")), 1},
		{"emitted", testutil.ToFloat64(f.wh.metrics.emitted.WithLabelValues("grafana")), 1},
		{"skipped resolved", testutil.ToFloat64(f.wh.metrics.skipped.WithLabelValues("grafana", skipResolved)), 1},
		{"skipped no_service", testutil.ToFloat64(f.wh.metrics.skipped.WithLabelValues("grafana", skipNoService)), 1},
		{"rejected series", float64(testutil.CollectAndCount(f.wh.metrics.rejected)), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestGrafanaWebhookRefusals(t *testing.T) {
	body := readTestdata(t, "grafana.json")
	window := DefaultReplayWindow
	for _, tc := range []struct {
		name   string
		req    func(*testing.T, *webhookFixture) *http.Request
		status int
		reason string
	}{
		{"a tampered body", func(t *testing.T, f *webhookFixture) *http.Request {
			req := f.grafanaRequest(t, body, testHMACSecret, testNow)
			tampered := bytes.Replace(body, []byte(`"service": "billy"`), []byte(`"service": "billz"`), 1)
			req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(tampered)), int64(len(tampered))
			return req
		}, 401, rejectBadSignature},
		{"a stale timestamp", func(t *testing.T, f *webhookFixture) *http.Request {
			return f.grafanaRequest(t, body, testHMACSecret, testNow.Add(-window-time.Second))
		}, 401, rejectStaleTS},
		{"a timestamp beyond the window ahead", func(t *testing.T, f *webhookFixture) *http.Request {
			return f.grafanaRequest(t, body, testHMACSecret, testNow.Add(window+time.Second))
		}, 401, rejectFutureTS},
		{"a missing signature", func(t *testing.T, f *webhookFixture) *http.Request {
			req := f.grafanaRequest(t, body, testHMACSecret, testNow)
			req.Header.Del(DefaultSignatureHeader)
			return req
		}, 401, rejectMissingSig},
		{"the signature in the header Grafana's code falls back to when none is configured", func(t *testing.T, f *webhookFixture) *http.Request {
			req := f.grafanaRequest(t, body, testHMACSecret, testNow)
			req.Header.Set("X-Grafana-Alert-Signature", req.Header.Get(DefaultSignatureHeader))
			req.Header.Del(DefaultSignatureHeader)
			return req
		}, 401, rejectMissingSig},
		{"a missing timestamp", func(t *testing.T, f *webhookFixture) *http.Request {
			req := f.grafanaRequest(t, body, testHMACSecret, testNow)
			req.Header.Del(DefaultTimestampHeader)
			return req
		}, 401, rejectMissingTS},
		{"a timestamp in milliseconds", func(t *testing.T, f *webhookFixture) *http.Request {
			req := f.grafanaRequest(t, body, testHMACSecret, testNow)
			req.Header.Set(DefaultTimestampHeader, strconv.FormatInt(testNow.UnixMilli(), 10))
			return req
		}, 401, rejectFutureTS},
		{"a timestamp with a sign", func(t *testing.T, f *webhookFixture) *http.Request {
			req := f.grafanaRequest(t, body, testHMACSecret, testNow)
			req.Header.Set(DefaultTimestampHeader, "+"+req.Header.Get(DefaultTimestampHeader))
			return req
		}, 401, rejectBadTS},
		{"a timestamp that is not a number", func(t *testing.T, f *webhookFixture) *http.Request {
			req := f.grafanaRequest(t, body, testHMACSecret, testNow)
			req.Header.Set(DefaultTimestampHeader, testNow.Format(time.RFC3339))
			return req
		}, 401, rejectBadTS},
		{"the wrong key", func(t *testing.T, f *webhookFixture) *http.Request {
			return f.grafanaRequest(t, body, "another-secret-0123456789", testNow)
		}, 401, rejectBadSignature},
		{"a signature over the body alone", func(t *testing.T, f *webhookFixture) *http.Request {
			req := f.grafanaRequest(t, body, testHMACSecret, testNow)
			m := hmac.New(sha256.New, []byte(testHMACSecret))
			m.Write(body)
			req.Header.Set(DefaultSignatureHeader, hex.EncodeToString(m.Sum(nil)))
			return req
		}, 401, rejectBadSignature},
		{"an old signed request with its timestamp rewritten to now", func(t *testing.T, f *webhookFixture) *http.Request {
			req := f.grafanaRequest(t, body, testHMACSecret, testNow.Add(-time.Hour))
			req.Header.Set(DefaultTimestampHeader, strconv.FormatInt(testNow.Unix(), 10))
			return req
		}, 401, rejectBadSignature},
		{"a signature that is not hex", func(t *testing.T, f *webhookFixture) *http.Request {
			req := f.grafanaRequest(t, body, testHMACSecret, testNow)
			req.Header.Set(DefaultSignatureHeader, strings.Repeat("zz", sha256.Size))
			return req
		}, 401, rejectBadSignature},
		{"a truncated signature", func(t *testing.T, f *webhookFixture) *http.Request {
			req := f.grafanaRequest(t, body, testHMACSecret, testNow)
			req.Header.Set(DefaultSignatureHeader, req.Header.Get(DefaultSignatureHeader)[:32])
			return req
		}, 401, rejectBadSignature},
		{"a signed body that is not JSON", func(t *testing.T, f *webhookFixture) *http.Request {
			return f.grafanaRequest(t, body[:len(body)/2], testHMACSecret, testNow)
		}, 400, rejectMalformed},
		{"a signed Alertmanager body", func(t *testing.T, f *webhookFixture) *http.Request {
			return f.grafanaRequest(t, readTestdata(t, "alertmanager.json"), testHMACSecret, testNow)
		}, 400, rejectMalformed},
		{"GET", func(t *testing.T, f *webhookFixture) *http.Request {
			req := f.grafanaRequest(t, nil, testHMACSecret, testNow)
			req.Method = http.MethodGet
			return req
		}, 405, rejectMethod},
		{"a body over the limit", func(t *testing.T, f *webhookFixture) *http.Request {
			return f.grafanaRequest(t, bytes.Repeat([]byte(" "), 4<<10+1), testHMACSecret, testNow)
		}, 413, rejectTooLarge},
		{"a chunked body over the limit", func(t *testing.T, f *webhookFixture) *http.Request {
			req := f.grafanaRequest(t, bytes.Repeat([]byte(" "), 8<<10), testHMACSecret, testNow)
			req.ContentLength = -1
			return req
		}, 413, rejectTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newWebhookFixture(t, nil)
			status, resp := f.do(t, tc.req(t, f))
			f.expectRefused(t, SourceGrafana, tc.status, status, resp, tc.reason)
		})
	}
}

func TestGrafanaWebhookTimestampWindowIsInclusive(t *testing.T) {
	for _, skew := range []time.Duration{-DefaultReplayWindow, DefaultReplayWindow} {
		f := newWebhookFixture(t, nil)
		if status, resp := f.do(t, f.grafanaRequest(t, readTestdata(t, "grafana.json"), testHMACSecret, testNow.Add(skew))); status != 202 {
			t.Errorf("timestamp now%+v: status %d (%s), want 202", skew, status, resp)
		}
	}
}

func TestGrafanaWebhookRefusesAReplay(t *testing.T) {
	f := newWebhookFixture(t, nil)
	body := readTestdata(t, "grafana.json")
	first := f.grafanaRequest(t, body, testHMACSecret, testNow)
	replay := first.Clone(context.Background())
	replay.Body = io.NopCloser(bytes.NewReader(body))
	if status, resp := f.do(t, first); status != 202 {
		t.Fatalf("first: status %d (%s)", status, resp)
	}
	status, resp := f.do(t, replay)
	if status != 401 || testutil.ToFloat64(f.wh.metrics.rejected.WithLabelValues("grafana", rejectReplayed)) != 1 {
		t.Errorf("replay: status %d (%s), want 401 counted as replayed", status, resp)
	}
	if _, calls := f.sink.alerts(); calls != 1 {
		t.Errorf("the sink got %d calls, want 1 (the first request)", calls)
	}
	// Grafana's own retry is signed anew, with the time of the retry.
	f.clock.Set(testNow.Add(time.Second))
	if status, resp := f.do(t, f.grafanaRequest(t, body, testHMACSecret, testNow.Add(time.Second))); status != 202 {
		t.Errorf("a re-signed retry: status %d (%s), want 202", status, resp)
	}
}

func TestGrafanaWebhookAcceptsPUT(t *testing.T) {
	f := newWebhookFixture(t, nil)
	req := f.grafanaRequest(t, readTestdata(t, "grafana.json"), testHMACSecret, testNow)
	req.Method = http.MethodPut
	if status, resp := f.do(t, req); status != 202 {
		t.Errorf("status %d (%s), want 202: Grafana's contact point may send PUT", status, resp)
	}
}

func TestGrafanaWebhookHeadersAreConfigurable(t *testing.T) {
	f := newWebhookFixture(t, func(c *WebhookConfig) {
		c.Grafana.SignatureHeader = "X-Hub-Sig"
		c.Grafana.TimestampHeader = "X-Grafana-Alerting-Timestamp"
	})
	req := f.grafanaRequest(t, readTestdata(t, "grafana.json"), testHMACSecret, testNow)
	req.Header.Set("X-Hub-Sig", req.Header.Get(DefaultSignatureHeader))
	req.Header.Set("X-Grafana-Alerting-Timestamp", req.Header.Get(DefaultTimestampHeader))
	req.Header.Del(DefaultSignatureHeader)
	req.Header.Del(DefaultTimestampHeader)
	if status, resp := f.do(t, req); status != 202 {
		t.Errorf("status %d (%s), want 202", status, resp)
	}
}

// An independent vector: Grafana's documented scheme, hex HMAC-SHA256 of
// "<timestamp>:<body>", computed with Python's hmac module.
func TestGrafanaSignatureVector(t *testing.T) {
	sum := grafanaSignature([]byte("secret"), "1700000000", []byte("test message"))
	if got, want := hex.EncodeToString(sum[:]), "36fa366a807205a13fc507ea4413374566ad5808c7ca7653f94d121fe5e64c2d"; got != want {
		t.Errorf("signature %s, want %s", got, want)
	}
	if _, ok := verifyGrafanaSignature([]byte("secret"), "36FA366A807205A13FC507EA4413374566AD5808C7CA7653F94D121FE5E64C2D", "1700000000", []byte("test message")); !ok {
		t.Error("an uppercase hex signature was refused")
	}
}

func TestAlertmanagerWebhookAcceptsTheBearerToken(t *testing.T) {
	for _, auth := range []string{"Bearer " + testToken, "bearer " + testToken} {
		f := newWebhookFixture(t, nil)
		status, resp := f.do(t, f.alertmanagerRequest(t, readTestdata(t, "alertmanager.json"), auth))
		if status != http.StatusAccepted {
			t.Fatalf("%q: status %d (%s), want 202", auth, status, resp)
		}
		got, calls := f.sink.alerts()
		if calls != 1 || len(got) != 2 || got[0].Service != "search" || got[0].PatternClass != IsolatedHost || got[1].PatternClass != "" {
			t.Errorf("%q: the sink got %d calls with %+v, want one call with the two search alerts", auth, calls, got)
		}
		if n := testutil.ToFloat64(f.wh.metrics.emitted.WithLabelValues("alertmanager")); n != 2 {
			t.Errorf("emitted = %v, want 2", n)
		}
	}
}

func TestAlertmanagerWebhookRefusals(t *testing.T) {
	body := readTestdata(t, "alertmanager.json")
	for _, tc := range []struct {
		name   string
		req    func(*testing.T, *webhookFixture) *http.Request
		status int
		reason string
	}{
		{"no Authorization header", func(t *testing.T, f *webhookFixture) *http.Request {
			return f.alertmanagerRequest(t, body, "")
		}, 401, rejectMissingToken},
		{"the wrong token", func(t *testing.T, f *webhookFixture) *http.Request {
			return f.alertmanagerRequest(t, body, "Bearer alertmanager-token-9876543210")
		}, 401, rejectBadToken},
		{"the token with a suffix", func(t *testing.T, f *webhookFixture) *http.Request {
			return f.alertmanagerRequest(t, body, "Bearer "+testToken+"0")
		}, 401, rejectBadToken},
		{"a prefix of the token", func(t *testing.T, f *webhookFixture) *http.Request {
			return f.alertmanagerRequest(t, body, "Bearer "+testToken[:10])
		}, 401, rejectBadToken},
		{"the token as a basic-auth password", func(t *testing.T, f *webhookFixture) *http.Request {
			req := f.alertmanagerRequest(t, body, "")
			req.SetBasicAuth("alertmanager", testToken)
			return req
		}, 401, rejectBadToken},
		{"the token without a scheme", func(t *testing.T, f *webhookFixture) *http.Request {
			return f.alertmanagerRequest(t, body, testToken)
		}, 401, rejectBadToken},
		{"Bearer and nothing", func(t *testing.T, f *webhookFixture) *http.Request {
			return f.alertmanagerRequest(t, body, "Bearer ")
		}, 401, rejectBadToken},
		{"a body that is not JSON", func(t *testing.T, f *webhookFixture) *http.Request {
			return f.alertmanagerRequest(t, []byte("alerts=1"), "Bearer "+testToken)
		}, 400, rejectMalformed},
		{"a version 3 body", func(t *testing.T, f *webhookFixture) *http.Request {
			return f.alertmanagerRequest(t, bytes.Replace(body, []byte(`"version": "4"`), []byte(`"version": "3"`), 1), "Bearer "+testToken)
		}, 400, rejectMalformed},
		{"PUT", func(t *testing.T, f *webhookFixture) *http.Request {
			req := f.alertmanagerRequest(t, body, "Bearer "+testToken)
			req.Method = http.MethodPut
			return req
		}, 405, rejectMethod},
		{"a body over the limit", func(t *testing.T, f *webhookFixture) *http.Request {
			return f.alertmanagerRequest(t, bytes.Repeat([]byte("["), 5<<10), "Bearer "+testToken)
		}, 413, rejectTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newWebhookFixture(t, nil)
			req := tc.req(t, f)
			resp, err := f.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			f.expectRefused(t, SourceAlertmanager, tc.status, resp.StatusCode, string(b), tc.reason)
			if tc.status == 401 && resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("a 401 without WWW-Authenticate")
			}
		})
	}
}

func TestWebhookAnswers503WhenTheSinkDoesNotTakeTheAlerts(t *testing.T) {
	for _, tc := range []struct {
		name string
		sink Sink
	}{
		{"the sink fails", SinkFunc(func(context.Context, []Alert) error { return errors.New("controller queue closed") })},
		{"the sink is full past the emit timeout", ChannelSink(make(chan Alert))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newWebhookFixture(t, func(c *WebhookConfig) { c.EmitTimeout = 200 * time.Millisecond })
			f.wh.sink = tc.sink
			resp, err := f.client.Do(f.alertmanagerRequest(t, readTestdata(t, "alertmanager.json"), "Bearer "+testToken))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
				t.Errorf("status %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
			}
			if got := testutil.ToFloat64(f.wh.metrics.rejected.WithLabelValues("alertmanager", rejectSinkUnavailable)); got != 1 {
				t.Errorf("rejected{sink_unavailable} = %v, want 1", got)
			}
			if got := testutil.ToFloat64(f.wh.metrics.accepted.WithLabelValues("alertmanager")); got != 0 {
				t.Errorf("accepted = %v, want 0", got)
			}
		})
	}
}

func TestWebhookWithNothingFiringDoesNotCallTheSink(t *testing.T) {
	f := newWebhookFixture(t, nil)
	body := []byte(`{"version": "4", "status": "resolved", "alerts": [{"status": "resolved", "labels": {"service": "search"}}]}`)
	if status, resp := f.do(t, f.alertmanagerRequest(t, body, "Bearer "+testToken)); status != 202 {
		t.Fatalf("status %d (%s), want 202", status, resp)
	}
	if _, calls := f.sink.alerts(); calls != 0 {
		t.Errorf("the sink got %d calls, want none", calls)
	}
}

func TestWebhookDisabledEndpointIsNotFound(t *testing.T) {
	f := newWebhookFixture(t, func(c *WebhookConfig) { c.Grafana = nil })
	status, _ := f.do(t, f.grafanaRequest(t, readTestdata(t, "grafana.json"), testHMACSecret, testNow))
	if status != http.StatusNotFound {
		t.Errorf("status %d, want 404", status)
	}
}

func TestNewWebhookRefusesUnreadableSecrets(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		cfg  WebhookConfig
		want string
	}{
		{"a missing secret file", WebhookConfig{TLSCertFile: "c", TLSKeyFile: "k",
			Grafana: &GrafanaConfig{Secret: SecretSource{File: dir + "/missing"}}}, "grafana.secret: open"},
		{"a short token", WebhookConfig{TLSCertFile: "c", TLSKeyFile: "k",
			Alertmanager: &AlertmanagerConfig{Token: SecretSource{File: writeFile(t, dir, "short", "abc")}}}, "alertmanager.token is 3 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewWebhook(tc.cfg, &recordingSink{}, nil)
			checkErr(t, err, tc.want)
		})
	}
}

func TestWebhookMetricsRegister(t *testing.T) {
	f := newWebhookFixture(t, nil)
	reg := prometheus.NewPedanticRegistry()
	if err := f.wh.Register(reg); err != nil {
		t.Fatal(err)
	}
	f.do(t, f.alertmanagerRequest(t, readTestdata(t, "alertmanager.json"), ""))
	n, err := testutil.GatherAndCount(reg, "spikehunt_alertintake_webhook_rejected_total")
	if err != nil || n != 1 {
		t.Errorf("gathered %d rejected series, %v; want 1", n, err)
	}
}

// Serve: a real HTTPS listener with a key pair from files; a client that
// trusts the certificate gets 202, plain HTTP gets nothing through, and
// cancelling the context stops the server.
// tlsConfig is a webhook config with a fresh self-signed key pair in
// files under dir, and the pool that trusts it.
func tlsConfig(t *testing.T, dir string) (WebhookConfig, *x509.CertPool) {
	t.Helper()
	certPEM, keyPEM, pool := selfSignedCert(t)
	return WebhookConfig{
		TLSCertFile: writeFile(t, dir, "tls.crt", string(certPEM)),
		TLSKeyFile:  writeFile(t, dir, "tls.key", string(keyPEM)),
	}, pool
}

// serveWebhook runs wh on a loopback listener until the returned stop,
// which fails t if ServeListener ended with an error.
func serveWebhook(t *testing.T, wh *Webhook) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- wh.ServeListener(ctx, ln) }()
	return ln.Addr().String(), func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("ServeListener: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("ServeListener did not return after its context ended")
		}
	}
}

func TestServeHTTPS(t *testing.T) {
	dir := t.TempDir()
	sink := &recordingSink{}
	cfg, pool := tlsConfig(t, dir)
	cfg.Alertmanager = &AlertmanagerConfig{Token: SecretSource{File: writeFile(t, dir, "token", testToken)}}
	wh, err := NewWebhook(cfg, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := serveWebhook(t, wh)
	base := "://" + addr + DefaultAlertmanagerPath

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, _ := http.NewRequest(http.MethodPost, "https"+base, bytes.NewReader(readTestdata(t, "alertmanager.json")))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("HTTPS: status %d, want 202", resp.StatusCode)
	}

	req, _ = http.NewRequest(http.MethodPost, "http"+base, bytes.NewReader(readTestdata(t, "alertmanager.json")))
	req.Header.Set("Authorization", "Bearer "+testToken)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusAccepted {
			t.Error("plain HTTP was accepted")
		}
	}
	if _, calls := sink.alerts(); calls != 1 {
		t.Errorf("the sink got %d calls, want 1 (the HTTPS request)", calls)
	}

	stop()
}

// A peer holding connections open cannot keep others out: it holds at
// most MaxConnectionsPerPeer, and a newcomer takes the place of an idle
// one. On Linux all of 127.0.0.0/8 is loopback: 127.0.0.2 is a peer of
// its own.
func TestServeHoldsAtMostItsShareOfConnectionsPerPeer(t *testing.T) {
	dir := t.TempDir()
	cfg, pool := tlsConfig(t, dir)
	cfg.MaxConnections = 4
	cfg.MaxConnectionsPerPeer = 2
	cfg.Alertmanager = &AlertmanagerConfig{Token: SecretSource{File: writeFile(t, dir, "token", testToken)}}
	wh, err := NewWebhook(cfg, &recordingSink{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := wh.Register(reg); err != nil {
		t.Fatal(err)
	}
	addr, stop := serveWebhook(t, wh)
	defer stop()
	dial := func(from string, timeout time.Duration) (*tls.Conn, error) {
		d := &net.Dialer{Timeout: timeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
		return c, err
	}
	// A flood of idle connections of one peer, and of a second.
	for i := range 8 {
		if _, err := dial([]string{"127.0.0.2", "127.0.0.3"}[i%2], 2*time.Second); err != nil {
			t.Logf("flood connection %d: %v", i, err)
		}
	}
	for i := range 3 {
		if _, err := dial("127.0.0.1", 2*time.Second); err != nil {
			t.Errorf("a sender's connection %d beside the flood: %v", i, err)
		}
	}
	if got := testutil.ToFloat64(wh.metrics.conns.WithLabelValues("evicted_idle")); got < 4 {
		t.Errorf("connections_refused_total{evicted_idle} = %v, want at least 4", got)
	}
}

func TestServeRefusesAMissingKeyPair(t *testing.T) {
	dir := t.TempDir()
	wh, err := NewWebhook(WebhookConfig{TLSCertFile: dir + "/tls.crt", TLSKeyFile: dir + "/tls.key",
		Alertmanager: &AlertmanagerConfig{Token: SecretSource{File: writeFile(t, dir, "token", testToken)}}}, &recordingSink{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	checkErr(t, wh.ServeListener(context.Background(), ln), "load the TLS key pair")
	if _, err := ln.Accept(); err == nil {
		t.Error("the listener was left open")
	}
}

// selfSignedCert makes a certificate for 127.0.0.1 and a pool trusting it.
func selfSignedCert(t *testing.T) (certPEM, keyPEM []byte, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "spikehunt-operator-webhook"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), pool
}

// The replay guard is in memory, so after a leader
// change the new leader's is empty. A Grafana request the old leader
// accepted, replayed to the new one within the window, is refused (503,
// signed_before_start) and reaches no sink; a request Grafana signs after
// the new leader started is accepted.
func TestAGrafanaRequestAcceptedByTheOldLeaderIsNotAcceptedAgainByTheNext(t *testing.T) {
	dir := t.TempDir()
	clock := fakeclock.New(testNow)
	cfg, pool := tlsConfig(t, dir)
	cfg.Grafana = &GrafanaConfig{Secret: SecretSource{File: writeFile(t, dir, "hmac", testHMACSecret)}}
	cfg.Clock = clock
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	body := readTestdata(t, "grafana.json")
	// leader serves a webhook until the returned stop.
	leader := func(sink *recordingSink) (*Webhook, string, func()) {
		wh, err := NewWebhook(cfg, sink, nil)
		if err != nil {
			t.Fatal(err)
		}
		addr, stop := serveWebhook(t, wh)
		return wh, "https://" + addr + DefaultGrafanaPath, stop
	}
	post := func(url string, signedAt time.Time) int {
		t.Helper()
		f := webhookFixture{srv: &httptest.Server{URL: strings.TrimSuffix(url, DefaultGrafanaPath)}, client: client}
		status, _ := f.do(t, f.grafanaRequest(t, body, testHMACSecret, signedAt))
		return status
	}

	oldSink := &recordingSink{}
	_, oldURL, stopOld := leader(oldSink)
	captured := testNow.Add(time.Second) // Grafana's clock is a second ahead: within the window
	if status := post(oldURL, captured); status != http.StatusAccepted {
		t.Fatalf("the old leader answered %d, want 202", status)
	}
	stopOld()

	clock.Set(testNow.Add(30 * time.Second)) // the new leader takes over well within the 5m window
	newSink := &recordingSink{}
	wh, newURL, stopNew := leader(newSink)
	defer stopNew()
	if status := post(newURL, captured); status != http.StatusServiceUnavailable {
		t.Errorf("the replay to the new leader: %d, want 503", status)
	}
	if _, calls := newSink.alerts(); calls != 0 {
		t.Errorf("the replay reached the new leader's sink (%d calls)", calls)
	}
	if got := testutil.ToFloat64(wh.metrics.rejected.WithLabelValues(string(SourceGrafana), rejectSignedBeforeStart)); got != 1 {
		t.Errorf("rejected{grafana, signed_before_start} = %v, want 1", got)
	}
	clock.Set(testNow.Add(32 * time.Second))
	if status := post(newURL, testNow.Add(31*time.Second)); status != http.StatusAccepted {
		t.Errorf("Grafana's retry, signed after the new leader started: %d, want 202", status)
	}
}
