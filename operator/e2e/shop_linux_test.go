package e2e

import (
	"context"
	"crypto/rand"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/tests/shopapp"
)

// shop is the test's app, service "shop" on the node (tests/shopapp): a
// /stall request holds the app's lock in nanosleep for stallFor, and the
// /fast requests queue behind it. Each request is handed to observe as
// the agent's intake would hand it on: with its handler thread's id, a
// trace id and weight 1.
type shop struct {
	url    string
	client *http.Client
}

const stallFor = time.Second

func startShop(t *testing.T, observe func(telemetry.Request)) *shop {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	app := &shopapp.App{StallFor: stallFor, Served: func(r shopapp.Request) {
		q := telemetry.Request{Service: "shop", Endpoint: r.Path, Start: r.Start, Duration: r.End.Sub(r.Start),
			Status: "200", ThreadID: r.ThreadID, Weight: 1}
		rand.Read(q.TraceID[:])
		rand.Read(q.SpanID[:])
		observe(q)
	}}
	srv := &http.Server{Handler: app}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return &shop{url: "http://" + ln.Addr().String(), client: &http.Client{Timeout: 30 * time.Second}}
}

// load sends /fast requests at rate per second until ctx ends.
func (s *shop) load(ctx context.Context, rate int) { shopapp.Load(ctx, s.url, rate) }

// stall sends one /stall request and returns when it was sent and when
// its answer came.
func (s *shop) stall(t *testing.T) (from, to time.Time) {
	t.Helper()
	from = time.Now()
	resp, err := s.client.Get(s.url + "/stall")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return from, time.Now()
}
