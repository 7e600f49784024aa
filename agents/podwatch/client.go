package podwatch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// tokenRereadEvery is how often the token file is read again: the kubelet
// rotates a projected ServiceAccount token well before it expires (at 80%
// of its hour), so a minute-old copy is always still valid.
const tokenRereadEvery = time.Minute

// tokenFile is the bearer token, read again every tokenRereadEvery and
// after the API server refused it.
type tokenFile struct {
	path string

	mu    sync.Mutex
	token string
	read  time.Time
}

func (t *tokenFile) get() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.token != "" && time.Since(t.read) < tokenRereadEvery {
		return t.token, nil
	}
	b, err := os.ReadFile(t.path)
	if err != nil {
		if t.token != "" {
			return t.token, nil // keep the last one: it may still be valid
		}
		return "", fmt.Errorf("podwatch: read the ServiceAccount token: %w", err)
	}
	t.token, t.read = strings.TrimSpace(string(b)), time.Now()
	return t.token, nil
}

// expire makes the next get read the file again.
func (t *tokenFile) expire() {
	t.mu.Lock()
	t.read = time.Time{}
	t.mu.Unlock()
}

// inClusterClient trusts the cluster's CA. The transport's HTTP/2 pings
// notice an API server that vanished without closing the connection,
// which would otherwise leave a watch waiting for its timeout.
func inClusterClient(caFile string) (*http.Client, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("podwatch: read the cluster CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("podwatch: the cluster CA %s holds no PEM certificate", caFile)
	}
	return &http.Client{Transport: &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          2,
		IdleConnTimeout:       90 * time.Second,
		HTTP2:                 &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second},
	}}, nil
}

// statusError is an API server's answer other than 200.
type statusError struct {
	code    int
	message string
}

func (e *statusError) Error() string {
	hint := ""
	switch e.code {
	case http.StatusForbidden:
		hint = " (the agent's ClusterRole needs get, list and watch on pods: helm/spikehunt, agent-rbac.yaml)"
	case http.StatusUnauthorized:
		hint = " (the ServiceAccount token was refused; it is read again)"
	}
	return fmt.Sprintf("podwatch: the API server answered %d: %.300s%s", e.code, e.message, hint)
}

// do GETs the pods with query q and returns a 200 response, whose body
// the caller closes. 410 Gone is errGone.
func (w *Watcher) do(ctx context.Context, q url.Values) (*http.Response, error) {
	u := w.base.JoinPath("api", "v1", "pods")
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "spikehunt-agent/podwatch")
	if w.token != nil {
		tok, err := w.token.get()
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := w.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("podwatch: GET pods: %w", err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusGone {
		return nil, errGone
	}
	if resp.StatusCode == http.StatusUnauthorized && w.token != nil {
		w.token.expire()
	}
	msg := resp.Status
	if b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10)); err == nil {
		var st wireStatus
		if json.Unmarshal(b, &st) == nil && st.Message != "" {
			msg = st.Message
		}
	}
	return nil, &statusError{code: resp.StatusCode, message: msg}
}

// isNetwork reports whether err is the connection's, not the stream's
// content: the watch can resume from its resourceVersion after it.
func isNetwork(err error) bool {
	var ne net.Error
	var ue *url.Error
	return errors.As(err, &ne) || errors.As(err, &ue) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF)
}
