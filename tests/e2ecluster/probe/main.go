//go:build linux

// Command probe is the cluster e2e's network probe: from its pod, with its
// pod's labels, it opens TCP connections where the test asks and says what
// happened. The test reaches it on the pod's IP:
//
//	GET /dial?addr=10.0.0.12:8123&timeout=3s
//
// answers 200 with "connected", "timeout" (no answer: a NetworkPolicy
// engine drops the packets) or "error: ..." (a reset, an unreachable
// network).
package main

import (
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
	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	http.HandleFunc("/dial", dial)
	log.Printf("probe listening on %s", *listen)
	if err := http.ListenAndServe(*listen, nil); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func dial(w http.ResponseWriter, r *http.Request) {
	addr := r.URL.Query().Get("addr")
	if _, _, err := net.SplitHostPort(addr); err != nil {
		http.Error(w, "addr: "+err.Error(), http.StatusBadRequest)
		return
	}
	timeout := 3 * time.Second
	if s := r.URL.Query().Get("timeout"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 || d > time.Minute {
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
