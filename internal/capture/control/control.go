// Package control is the capture control API as it crosses the agent's
// unix socket: the wire types (ArmRequest, Status) and the Client that
// `spikehunt-agent capture` and the `spikehunt demo` use. The server side
// is the engine's (capture.Engine.Handler). It imports only the standard
// library and the artifact record (artifact/record), so a program that
// drives an agent holds neither its recorders nor a store client.
package control

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

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
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

// MaxRequestBytes bounds a control request body.
const MaxRequestBytes = 64 << 10

// FireRequest is the optional body of POST /v1/captures/{id}/fire.
type FireRequest struct {
	Reason string `json:"reason"`
}

// State is where a capture is in its life.
type State string

// States, in order; Failed, Aborted and Disarmed end a capture early.
const (
	Armed     State = "Armed"
	Fired     State = "Fired"     // the pre-window is on disk; recording the post-window
	Collected State = "Collected" // files sealed and published
	Failed    State = "Failed"
	Aborted   State = "Aborted" // the governor stopped it (memory pressure)
	Disarmed  State = "Disarmed"
)

// Terminal reports whether s ends a capture.
func (s State) Terminal() bool { return s == Collected || s == Failed || s == Aborted || s == Disarmed }

// Status is a capture as the engine reports it.
type Status struct {
	ID      string    `json:"id"`
	Backend string    `json:"backend"`
	State   State     `json:"state"`
	Error   string    `json:"error,omitempty"`
	ArmedAt time.Time `json:"armed_at"`
	FiredAt time.Time `json:"fired_at,omitzero"`
	// FireToDump is from the firing request's completion (or the remote
	// fire) to the pre-window dump being on disk.
	FireToDump time.Duration `json:"fire_to_dump_ns,omitempty"`
	// Cause is what fired the capture, from Fired on.
	Cause *record.FireCause `json:"cause,omitempty"`
	// Location is where the artifact is: its record's URL in the store
	// (file:///… or s3://…), or the work directory when the engine has
	// no store. Files are the files' URLs, in the record's order.
	Location string           `json:"location,omitempty"`
	Files    []string         `json:"files,omitempty"`
	Metadata *record.Metadata `json:"metadata,omitempty"`
}

// Error is the body of every answer that is not a success.
type Error struct {
	Error string `json:"error"`
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
		var ae Error
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
func (c *Client) Download(ctx context.Context, id string, f record.File, w io.Writer) error {
	if err := errors.Join(record.ValidName("capture id", id), record.ValidName("file", f.Name)); err != nil {
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
		var ae Error
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
		return fmt.Errorf("%w: %s of capture %s: got %d bytes sha256 %x, the record says %d bytes %s", record.ErrCorrupt, f.Name, id, n, h.Sum(nil), f.Bytes, f.SHA256)
	}
	return nil
}
