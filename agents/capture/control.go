package capture

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// ArmRequest is a capture request as the control socket and the CLI take
// it: names and bounds only, never program text or paths.
type ArmRequest struct {
	ID       string `json:"id"`
	Backend  string `json:"backend"`
	Profile  string `json:"profile,omitempty"`
	Script   string `json:"script,omitempty"`
	RingKB   int    `json:"ring_kb,omitempty"`
	Pre      string `json:"pre"`  // Go duration: "10s"
	Post     string `json:"post"` // Go duration
	Service  string `json:"service,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	Latency  string `json:"latency,omitempty"` // fire on one request slower than this
	P99      string `json:"p99,omitempty"`     // fire when a second's p99 is over this
	Cooldown string `json:"cooldown,omitempty"`
	CPUs     []int  `json:"cpus,omitempty"`
}

// maxRequestBytes bounds a control request body.
const maxRequestBytes = 64 << 10

// DecodeArmRequest parses and checks a request body into a Spec.
func DecodeArmRequest(b []byte) (Spec, error) {
	if len(b) > maxRequestBytes {
		return Spec{}, fmt.Errorf("%w: request of %d bytes (at most %d)", ErrInvalid, len(b), maxRequestBytes)
	}
	var r ArmRequest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Spec{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if dec.More() {
		return Spec{}, fmt.Errorf("%w: trailing data after the request", ErrInvalid)
	}
	return r.Spec()
}

// Spec turns the request into a validated Spec.
func (r ArmRequest) Spec() (Spec, error) {
	s := Spec{ID: r.ID, Backend: r.Backend, Profile: r.Profile, Script: r.Script, RingKB: r.RingKB, CPUs: r.CPUs,
		Trigger: Trigger{Service: r.Service, Endpoint: r.Endpoint}}
	for _, d := range []struct {
		name string
		in   string
		out  *time.Duration
	}{{"pre", r.Pre, &s.Pre}, {"post", r.Post, &s.Post}, {"latency", r.Latency, &s.Trigger.Latency},
		{"p99", r.P99, &s.Trigger.P99}, {"cooldown", r.Cooldown, &s.Trigger.Cooldown}} {
		if d.in == "" {
			continue
		}
		v, err := time.ParseDuration(d.in)
		if err != nil {
			return Spec{}, fmt.Errorf("%w: %s: %v", ErrInvalid, d.name, err)
		}
		*d.out = v
	}
	return s, s.Validate()
}

// Handler serves the engine's control API, for the agent's unix socket:
//
//	GET    /v1/backends             which backends this host can run
//	GET    /v1/captures             every capture
//	POST   /v1/captures             arm (an ArmRequest)
//	GET    /v1/captures/{id}        one capture
//	POST   /v1/captures/{id}/fire   fire ({"reason": "…"} or empty)
//	DELETE /v1/captures/{id}        disarm
//	GET    /v1/captures/{id}/wait   block until the capture ends (?timeout=2m)
//	GET    /v1/captures/{id}/files/{name}  one file of a stored artifact, checked against its sha256
func (e *Engine) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/captures/{id}/files/{name}", func(w http.ResponseWriter, r *http.Request) {
		if e.cfg.Store == nil {
			writeError(w, fmt.Errorf("%w: this agent keeps artifacts in its work directory, not a store", ErrNotSupported))
			return
		}
		id, name := r.PathValue("id"), r.PathValue("name")
		if err := errors.Join(ValidName("capture id", id), ValidName("file", name)); err != nil {
			writeError(w, err)
			return
		}
		rc, err := e.cfg.Store.Open(r.Context(), id, name)
		if err != nil {
			writeError(w, err)
			return
		}
		defer rc.Close()
		w.Header().Set("Content-Type", "application/octet-stream")
		// A read that fails its checksum midway ends the body early;
		// the client sees a short or broken transfer, never wrong bytes
		// quietly.
		io.Copy(w, rc)
	})
	mux.HandleFunc("GET /v1/backends", func(w http.ResponseWriter, r *http.Request) {
		out := map[string]string{}
		for n, err := range e.Backends() {
			out[n] = "ok"
			if err != nil {
				out[n] = err.Error()
			}
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /v1/captures", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, e.List())
	})
	mux.HandleFunc("POST /v1/captures", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBytes+1))
		if err != nil {
			writeError(w, err)
			return
		}
		spec, err := DecodeArmRequest(b)
		if err != nil {
			writeError(w, err)
			return
		}
		st, err := e.Arm(r.Context(), spec)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, st)
	})
	mux.HandleFunc("GET /v1/captures/{id}", func(w http.ResponseWriter, r *http.Request) {
		st, ok := e.Get(r.PathValue("id"))
		if !ok {
			writeError(w, fmt.Errorf("%w: no capture %q", errNotFound, r.PathValue("id")))
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("POST /v1/captures/{id}/fire", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Reason string `json:"reason"`
		}
		b, _ := io.ReadAll(io.LimitReader(r.Body, 4096))
		if len(bytes.TrimSpace(b)) > 0 {
			if err := json.Unmarshal(b, &body); err != nil {
				writeError(w, fmt.Errorf("%w: %v", ErrInvalid, err))
				return
			}
		}
		if err := e.Fire(r.PathValue("id"), body.Reason); err != nil {
			writeError(w, err)
			return
		}
		st, _ := e.Get(r.PathValue("id"))
		writeJSON(w, http.StatusAccepted, st)
	})
	mux.HandleFunc("DELETE /v1/captures/{id}", func(w http.ResponseWriter, r *http.Request) {
		if err := e.Disarm(r.PathValue("id")); err != nil {
			writeError(w, err)
			return
		}
		st, _ := e.Get(r.PathValue("id"))
		writeJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("GET /v1/captures/{id}/wait", func(w http.ResponseWriter, r *http.Request) {
		timeout := 5 * time.Minute
		if s := r.URL.Query().Get("timeout"); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 || d > time.Hour {
				writeError(w, fmt.Errorf("%w: timeout %q (a duration up to 1h)", ErrInvalid, s))
				return
			}
			timeout = d
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		st, err := e.Wait(ctx, r.PathValue("id"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
	return mux
}

var errNotFound = errors.New("not found")

type apiError struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrInvalid):
		code = http.StatusBadRequest
		if errors.Is(err, errNoCapture) {
			code = http.StatusNotFound
		}
	case errors.Is(err, errNotFound), errors.Is(err, ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, ErrNotSupported):
		code = http.StatusNotImplemented
	case errors.Is(err, ErrBusy):
		code = http.StatusTooManyRequests
	case errors.Is(err, context.DeadlineExceeded):
		code = http.StatusGatewayTimeout
	}
	writeJSON(w, code, apiError{Error: err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// Client talks to an agent's control socket.
type Client struct {
	hc *http.Client
}

// NewClient returns a client of the unix socket at path.
func NewClient(path string) *Client {
	return &Client{hc: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}}}
}

// Do sends one request and decodes the JSON answer into out; an error
// answer comes back as an error with the agent's message.
func (c *Client) Do(ctx context.Context, method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+path, rd)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("agent control socket: %w (is spikehunt-agent running with captures enabled, and are you root?)", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var ae apiError
		if json.Unmarshal(b, &ae) == nil && ae.Error != "" {
			return fmt.Errorf("agent: %s (HTTP %d)", ae.Error, resp.StatusCode)
		}
		return fmt.Errorf("agent: HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// Download streams one file of a stored artifact into w and checks it
// against the sha256 its metadata records.
func (c *Client) Download(ctx context.Context, id string, f File, w io.Writer) error {
	if err := errors.Join(ValidName("capture id", id), ValidName("file", f.Name)); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/v1/captures/"+id+"/files/"+f.Name, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("agent control socket: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var ae apiError
		if json.Unmarshal(b, &ae) == nil && ae.Error != "" {
			return fmt.Errorf("agent: %s (HTTP %d)", ae.Error, resp.StatusCode)
		}
		return fmt.Errorf("agent: HTTP %d", resp.StatusCode)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), resp.Body)
	if err != nil {
		return fmt.Errorf("download %s: %w", f.Name, err)
	}
	if n != f.Bytes || hex.EncodeToString(h.Sum(nil)) != f.SHA256 {
		return fmt.Errorf("%w: %s of capture %s: got %d bytes sha256 %x, the record says %d bytes %s", ErrCorrupt, f.Name, id, n, h.Sum(nil), f.Bytes, f.SHA256)
	}
	return nil
}
