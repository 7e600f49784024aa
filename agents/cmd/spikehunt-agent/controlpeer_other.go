//go:build !linux

package main

import (
	"log/slog"
	"net"
)

// rootPeersOnly leaves the socket's 0600 mode as the only check: only
// Linux tells a unix socket's peer here.
func rootPeersOnly(ln net.Listener, _ *slog.Logger) net.Listener { return ln }

func checkControlDir(string) error { return nil }
