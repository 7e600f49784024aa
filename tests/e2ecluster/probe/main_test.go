//go:build linux

package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// The probe refuses to start without a token, /dial refuses a request
// without it, and with it reports a connection to a listening port.
func TestTheProbeDialsOnlyForItsToken(t *testing.T) {
	if _, err := newServer(":0", ""); err == nil {
		t.Fatal("newServer with no token: no error, want a refusal")
	}
	srv, err := newServer(":0", "t0ken")
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler)
	defer ts.Close()
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	get := func(auth string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+"/dial?timeout=2s&addr="+url.QueryEscape(target.Addr().String()), nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, auth := range []string{"", "Bearer wrong", "t0ken"} {
		if code, _ := get(auth); code != http.StatusUnauthorized {
			t.Errorf("/dial with Authorization %q: %d, want 401", auth, code)
		}
	}
	if code, body := get("Bearer t0ken"); code != http.StatusOK || body != "connected" {
		t.Errorf("/dial with the token: %d %q, want 200 connected", code, body)
	}
}
