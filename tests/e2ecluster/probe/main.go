//go:build linux

// Command probe is the cluster e2e's network probe: from its pod, with its
// pod's labels, it opens TCP connections where the test asks and says what
// happened. The test reaches it on the pod's IP:
//
//	GET /dial?addr=10.0.0.12:8123&timeout=3s
//
// answers 200 with "connected", "timeout" (no answer: a NetworkPolicy
// engine drops the packets) or "error: ..." (a reset, an unreachable
// network). /dial opens connections for whoever asks, so it wants the
// bearer token in $PROBE_TOKEN, and the probe refuses to start without
// one; /healthz (the kubelet's readiness probe) needs none.
package main

import (
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	listen := flag.String("listen", ":8080", "address of the HTTP server the test calls")
	flag.Parse()
	srv, err := newServer(*listen, os.Getenv("PROBE_TOKEN"))
	if err != nil {
		log.Print(err)
		os.Exit(2)
	}
	log.Printf("probe listening on %s", *listen)
	if err := srv.ListenAndServe(); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

// newServer is the probe's server on listen; /dial wants token.
func newServer(listen, token string) (*http.Server, error) {
	if token == "" {
		return nil, errors.New("probe: $PROBE_TOKEN is empty: /dial would open connections for anyone who reaches the pod")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/dial", func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+token)) != 1 {
			http.Error(w, "want the bearer token of $PROBE_TOKEN", http.StatusUnauthorized)
			return
		}
		dial(w, r)
	})
	return &http.Server{
		Addr: listen, Handler: mux,
		MaxHeaderBytes:    8 << 10,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      maxDialTimeout + 10*time.Second,
		IdleTimeout:       30 * time.Second,
	}, nil
}

// maxDialTimeout bounds the timeout a /dial may ask for.
const maxDialTimeout = time.Minute

func dial(w http.ResponseWriter, r *http.Request) {
	addr := r.URL.Query().Get("addr")
	if _, _, err := net.SplitHostPort(addr); err != nil {
		http.Error(w, "addr: "+err.Error(), http.StatusBadRequest)
		return
	}
	timeout := 3 * time.Second
	if s := r.URL.Query().Get("timeout"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 || d > maxDialTimeout {
			http.Error(w, "timeout: want a duration up to 1m", http.StatusBadRequest)
			return
		}
		timeout = d
	}
	conn, err := net.DialTimeout("tcp", addr, timeout)
	var nerr net.Error
	switch {
	case err == nil:
		conn.Close()
		fmt.Fprint(w, "connected")
	case errors.As(err, &nerr) && nerr.Timeout():
		fmt.Fprint(w, "timeout")
	default:
		fmt.Fprint(w, "error: "+err.Error())
	}
	log.Printf("dial %s: %v", addr, err)
}
