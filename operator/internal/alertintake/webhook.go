package alertintake

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spikehunt/spikehunt/internal/peerconns"
)

// Webhook receives Grafana alerting and Alertmanager notifications over
// HTTPS and hands their firing alerts to a Sink. Handler serves the
// endpoints (for tests, or another server); Serve runs the HTTPS server.
type Webhook struct {
	cfg     WebhookConfig
	sink    Sink
	log     *slog.Logger
	metrics *webhookMetrics

	grafanaSecret []byte
	replay        *replayGuard
	tokenDigest   [sha256.Size]byte
	// servingSince is the Unix second ServeListener started in. The replay
	// guard lives in memory, so it knows nothing of the requests an earlier
	// leader accepted: a Grafana request signed in or before that second
	// may have been one of them, and is refused with 503. Grafana signs
	// each retry anew, so its own requests get through on the next try.
	// Zero (Handler alone) refuses nothing.
	servingSince atomic.Int64
}

// NewWebhook fills cfg's defaults, checks it and reads the secrets it
// names.
func NewWebhook(cfg WebhookConfig, sink Sink, log *slog.Logger) (*Webhook, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if sink == nil {
		return nil, errors.New("intake: webhook: no sink")
	}
	if log == nil {
		log = slog.Default()
	}
	w := &Webhook{cfg: cfg, sink: sink, log: log, metrics: newWebhookMetrics()}
	if g := cfg.Grafana; g != nil {
		secret, err := g.Secret.load("grafana.secret")
		if err != nil {
			return nil, err
		}
		w.grafanaSecret = secret
		w.replay = newReplayGuard(g.ReplayCacheSize)
	}
	if a := cfg.Alertmanager; a != nil {
		token, err := a.Token.load("alertmanager.token")
		if err != nil {
			return nil, err
		}
		w.tokenDigest = tokenDigest(token)
	}
	return w, nil
}

// Register adds the Webhook's metrics to reg.
func (w *Webhook) Register(reg prometheus.Registerer) error { return w.metrics.register(reg) }

// Handler serves the enabled endpoints; other paths get 404.
func (w *Webhook) Handler() http.Handler {
	mux := http.NewServeMux()
	if w.cfg.Grafana != nil {
		mux.HandleFunc(w.cfg.Grafana.Path, w.serveGrafana)
	}
	if w.cfg.Alertmanager != nil {
		mux.HandleFunc(w.cfg.Alertmanager.Path, w.serveAlertmanager)
	}
	return mux
}

// serveGrafana: method, then the headers (cheap, before reading a body),
// then the body's size and signature, a replay, and only then the JSON.
func (w *Webhook) serveGrafana(rw http.ResponseWriter, r *http.Request) {
	const ep = SourceGrafana
	g := w.cfg.Grafana
	// Grafana's contact point sends POST or PUT ("HTTP Method").
	if r.Method != http.MethodPost && r.Method != http.MethodPut {
		rw.Header().Set("Allow", "POST, PUT")
		w.reject(rw, r, ep, http.StatusMethodNotAllowed, rejectMethod, "")
		return
	}
	sig := r.Header.Get(g.SignatureHeader)
	if sig == "" {
		w.reject(rw, r, ep, http.StatusUnauthorized, rejectMissingSig, "")
		return
	}
	tsValue := r.Header.Get(g.TimestampHeader)
	if tsValue == "" {
		w.reject(rw, r, ep, http.StatusUnauthorized, rejectMissingTS, "")
		return
	}
	now := w.cfg.Clock.Now()
	ts, reason := checkGrafanaTimestamp(tsValue, now, g.ReplayWindow)
	if reason != "" {
		w.reject(rw, r, ep, http.StatusUnauthorized, reason, "")
		return
	}
	body, status, reason := w.readBody(rw, r)
	if reason != "" {
		w.reject(rw, r, ep, status, reason, "")
		return
	}
	sum, ok := verifyGrafanaSignature(w.grafanaSecret, sig, tsValue, body)
	if !ok {
		w.reject(rw, r, ep, http.StatusUnauthorized, rejectBadSignature, "")
		return
	}
	authenticated(r)
	if ts.Unix() <= w.servingSince.Load() {
		rw.Header().Set("Retry-After", "1")
		w.reject(rw, r, ep, http.StatusServiceUnavailable, rejectSignedBeforeStart, "")
		return
	}
	if !w.replay.firstSeen(sum, ts.Add(g.ReplayWindow), now) {
		w.reject(rw, r, ep, http.StatusUnauthorized, rejectReplayed, "")
		return
	}
	alerts, skipped, err := decodeGrafana(body, now)
	w.deliver(rw, r, ep, alerts, skipped, err)
}

func (w *Webhook) serveAlertmanager(rw http.ResponseWriter, r *http.Request) {
	const ep = SourceAlertmanager
	if r.Method != http.MethodPost {
		rw.Header().Set("Allow", "POST")
		w.reject(rw, r, ep, http.StatusMethodNotAllowed, rejectMethod, "")
		return
	}
	if reason := bearerMatches(r.Header.Get("Authorization"), w.tokenDigest); reason != "" {
		rw.Header().Set("WWW-Authenticate", `Bearer realm="spikehunt"`)
		w.reject(rw, r, ep, http.StatusUnauthorized, reason, "")
		return
	}
	authenticated(r)
	body, status, reason := w.readBody(rw, r)
	if reason != "" {
		w.reject(rw, r, ep, status, reason, "")
		return
	}
	alerts, skipped, err := decodeAlertmanager(body, w.cfg.Clock.Now())
	w.deliver(rw, r, ep, alerts, skipped, err)
}

// readBody reads the whole body, at most MaxBodyBytes. It returns a status
// and reject reason when it cannot.
func (w *Webhook) readBody(rw http.ResponseWriter, r *http.Request) ([]byte, int, string) {
	if r.ContentLength > w.cfg.MaxBodyBytes {
		return nil, http.StatusRequestEntityTooLarge, rejectTooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, w.cfg.MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, http.StatusRequestEntityTooLarge, rejectTooLarge
		}
		return nil, http.StatusBadRequest, rejectReadError
	}
	return body, 0, ""
}

// deliver answers an authenticated request: 400 when its body did not
// decode, else 202 once the sink took the alerts, or 503 when it did not
// in time.
func (w *Webhook) deliver(rw http.ResponseWriter, r *http.Request, ep Source, alerts []Alert, skipped map[string]int, decodeErr error) {
	if decodeErr != nil {
		// The sender authenticated: telling it what is wrong helps whoever
		// wrote its template.
		w.reject(rw, r, ep, http.StatusBadRequest, reasonOf(decodeErr), decodeErr.Error())
		return
	}
	if len(alerts) > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), w.cfg.EmitTimeout)
		err := w.sink.Emit(ctx, alerts)
		cancel()
		if err != nil {
			rw.Header().Set("Retry-After", "5")
			w.log.Warn("intake: webhook: the operator did not take the alerts in time; the sender will retry",
				"endpoint", ep, "alerts", len(alerts), "err", err)
			w.reject(rw, r, ep, http.StatusServiceUnavailable, rejectSinkUnavailable, "")
			return
		}
	}
	w.metrics.accepted.WithLabelValues(string(ep)).Inc()
	w.metrics.emitted.WithLabelValues(string(ep)).Add(float64(len(alerts)))
	n := 0
	for reason, k := range skipped {
		w.metrics.skipped.WithLabelValues(string(ep), reason).Add(float64(k))
		n += k
	}
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	rw.WriteHeader(http.StatusAccepted)
	fmt.Fprintf(rw, "accepted %d alerts, skipped %d\n", len(alerts), n)
}

// reject counts and answers a refused request. The response says the
// status and reason, and detail when there is one.
func (w *Webhook) reject(rw http.ResponseWriter, r *http.Request, ep Source, status int, reason, detail string) {
	w.metrics.rejected.WithLabelValues(string(ep), reason).Inc()
	w.log.Debug("intake: webhook request refused", "endpoint", ep, "status", status, "reason", reason,
		"remote", r.RemoteAddr, "detail", detail)
	msg := strconv.Itoa(status) + " " + reason
	if detail != "" {
		msg += ": " + detail
	}
	http.Error(rw, msg, status)
}

// Serve listens on cfg.Address and serves HTTPS until ctx ends, then shuts
// down gracefully (requests in flight get up to 10s).
func (w *Webhook) Serve(ctx context.Context) error {
	ln, err := net.Listen("tcp", w.cfg.Address)
	if err != nil {
		return fmt.Errorf("intake: webhook: %w", err)
	}
	return w.ServeListener(ctx, ln)
}

// ServeListener is Serve on a listener of the caller's; it closes ln.
func (w *Webhook) ServeListener(ctx context.Context, ln net.Listener) error {
	w.servingSince.Store(w.cfg.Clock.Now().Unix())
	cert, err := tls.LoadX509KeyPair(w.cfg.TLSCertFile, w.cfg.TLSKeyFile)
	if err != nil {
		ln.Close()
		return fmt.Errorf("intake: webhook: load the TLS key pair %s, %s: %w", w.cfg.TLSCertFile, w.cfg.TLSKeyFile, err)
	}
	srv := &http.Server{
		Handler:   w.Handler(),
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}},
		// The headers are tiny; a client that trickles them is holding a
		// connection, not sending an alert.
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      w.cfg.EmitTimeout + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		// TLS handshake failures of scanners and probes are not news.
		ErrorLog: slog.NewLogLogger(w.log.Handler(), slog.LevelDebug),
	}
	gated, err := peerconns.Listen(ln, peerconns.Config{
		Max:      w.cfg.MaxConnections,
		PerPeer:  w.cfg.MaxConnectionsPerPeer,
		Reserved: peerconns.DefaultReserved(w.cfg.MaxConnections),
		Closed:   func(r peerconns.Reason) { w.metrics.conns.WithLabelValues(string(r)).Inc() },
	})
	if err != nil {
		ln.Close()
		return fmt.Errorf("intake: webhook: %w", err)
	}
	srv.ConnState = peerconns.ConnState
	srv.ConnContext = peerconns.ConnContext
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(gated, "", "") }()
	select {
	case err := <-done:
		return fmt.Errorf("intake: webhook: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("intake: webhook: %w", err)
	}
	return nil
}

// authenticated marks r's connection as carrying an authenticated sender:
// it may then take the places kept for them, and no stranger's connection
// closes it to make room.
func authenticated(r *http.Request) {
	if c := peerconns.FromContext(r.Context()); c != nil {
		c.Authenticate()
	}
}
