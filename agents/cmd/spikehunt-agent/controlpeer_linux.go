package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"syscall"
)

// rootPeersOnly serves only connections whose peer is root or the
// agent's own user (SO_PEERCRED, the credentials at connect time). The
// socket's 0600 mode already keeps others out; this holds when the mode
// or the folder was loosened by hand, or the socket was bind-mounted
// somewhere else.
func rootPeersOnly(ln net.Listener, log *slog.Logger) net.Listener {
	return &peerCheckListener{Listener: ln, log: log, self: uint32(os.Geteuid())}
}

type peerCheckListener struct {
	net.Listener
	log  *slog.Logger
	self uint32
}

func (l *peerCheckListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uid, pid, err := peerUID(c)
		if err == nil && (uid == 0 || uid == l.self) {
			return c, nil
		}
		c.Close()
		l.log.Warn("capture control socket: refused a connection that is not root's", "uid", uid, "pid", pid, "err", err)
	}
}

func peerUID(c net.Conn) (uint32, int32, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, 0, errors.New("not a unix socket")
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *syscall.Ucred
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		cred, gerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if gerr != nil {
		return 0, 0, fmt.Errorf("SO_PEERCRED: %w", gerr)
	}
	return cred.Uid, cred.Pid, nil
}

// checkControlDir refuses a control socket folder that another user owns:
// whoever can write it can put their own socket where the CLI, run as
// root, will talk to it. A folder of the agent's that others may write
// (an emptyDir volume is made 0777) is made 0700 before the socket is
// bound: from then on nobody else can add, rename or remove anything in
// it, and the socket is made anew in it. That is what the error told the
// operator to do by hand.
func checkControlDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if st.Uid != uint32(os.Geteuid()) {
		return fmt.Errorf("control socket folder %s is owned by uid %d, not the agent's (%d): chown it, or set capture.socket to a path in a folder of the agent's", dir, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o022 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("control socket folder %s is writable by group or others (mode %04o) and chmod 0700 failed: %w", dir, fi.Mode().Perm(), err)
		}
	}
	return nil
}
