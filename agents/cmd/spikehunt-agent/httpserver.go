package main

import (
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// serverLimits bound what one client can hold of an HTTP server: a
// connection that trickles its request, reads its response slowly, or idles
// between requests is closed, and at most MaxConns are served at once (the
// next wait in the kernel's accept queue).
type serverLimits struct {
	ReadHeader, Read, Write, Idle time.Duration
	MaxConns                      int
}

// metricsLimits serve /metrics, /healthz and /debug/pprof. Write leaves
// room for pprof's default 30 s profile, which pprof refuses when the
// server's WriteTimeout is shorter.
func metricsLimits() serverLimits {
	return serverLimits{ReadHeader: 5 * time.Second, Read: 10 * time.Second, Write: 60 * time.Second, Idle: time.Minute, MaxConns: 32}
}

// controlLimits serve the capture control socket. No write timeout: a
// collect answers when the capture's files are sealed, which a timeout
// picked here cannot know; the socket is local and its folder 0750.
func controlLimits() serverLimits {
	return serverLimits{ReadHeader: 5 * time.Second, Read: 30 * time.Second, Idle: time.Minute, MaxConns: 16}
}

// newServer returns a server for h under l and ln capped at l.MaxConns.
func newServer(ln net.Listener, h http.Handler, l serverLimits) (*http.Server, net.Listener) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: l.ReadHeader, ReadTimeout: l.Read, WriteTimeout: l.Write, IdleTimeout: l.Idle, MaxHeaderBytes: 64 << 10}
	return srv, netutil.LimitListener(ln, l.MaxConns)
}
