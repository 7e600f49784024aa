package capture

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/capture/control"
)

// DecodeArmRequest parses and checks a request body into a Spec.
func DecodeArmRequest(b []byte) (Spec, error) {
	if len(b) > control.MaxRequestBytes {
		return Spec{}, fmt.Errorf("%w: request of %d bytes (at most %d)", ErrInvalid, len(b), control.MaxRequestBytes)
	}
	var r control.ArmRequest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Spec{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if dec.More() {
		return Spec{}, fmt.Errorf("%w: trailing data after the request", ErrInvalid)
	}
	return SpecOf(r)
}

// SpecOf turns a control request into a validated Spec.
func SpecOf(r control.ArmRequest) (Spec, error) {
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
		b, err := io.ReadAll(io.LimitReader(r.Body, control.MaxRequestBytes+1))
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
		var body control.FireRequest
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

func writeError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrInvalid):
		code = http.StatusBadRequest
		if errors.Is(err, errNoCapture) {
			code = http.StatusNotFound
		}
	case errors.Is(err, errNotFound), errors.Is(err, artifact.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, ErrNotSupported):
		code = http.StatusNotImplemented
	case errors.Is(err, ErrBusy):
		code = http.StatusTooManyRequests
	case errors.Is(err, context.DeadlineExceeded):
		code = http.StatusGatewayTimeout
	}
	writeJSON(w, code, control.Error{Error: err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
