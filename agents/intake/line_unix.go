//go:build unix

package intake

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
)

// listenUnixgram binds the line-protocol unix datagram socket, creating
// its directory and replacing a stale socket file.
func (in *Intake) listenUnixgram(ctx context.Context) (net.PacketConn, error) {
	path := in.cfg.LineUnix
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("line unixgram: %w", err)
		}
		// 0755 whatever the umask: apps of every user must enter it.
		if err := os.Chmod(dir, 0o755); err != nil {
			return nil, fmt.Errorf("line unixgram: %w", err)
		}
	}
	// A folder made by something else (an older agent put its 0750
	// control socket folder here) can hide the socket from the apps its
	// mode admits: say so, but leave the folder as the admin made it.
	if fi, err := os.Stat(dir); err == nil {
		if m := fi.Mode().Perm(); in.cfg.LineUnixMode&0o002 != 0 && m&0o001 == 0 {
			in.log.Warn("intake: the line socket's folder is not searchable by others: apps of other users cannot reach the socket",
				"dir", dir, "mode", fmt.Sprintf("%04o", m), "fix", "chmod o+x "+dir+", or set line_unix to a path in a 0755 folder")
		}
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, fmt.Errorf("line unixgram: %w", err)
	}
	var lc net.ListenConfig
	pc, err := lc.ListenPacket(ctx, "unixgram", path)
	if err != nil {
		return nil, fmt.Errorf("line unixgram: %w", err)
	}
	// Before anyone can send: a datagram queued earlier has no sender.
	if err := setPassCred(pc); err != nil {
		pc.Close()
		os.Remove(path)
		return nil, fmt.Errorf("line unixgram: SO_PASSCRED: %w", err)
	}
	// The umask decides the mode at bind; apps need write permission.
	if err := os.Chmod(path, in.cfg.LineUnixMode); err != nil {
		pc.Close()
		os.Remove(path)
		return nil, fmt.Errorf("line unixgram: %w", err)
	}
	setReadBuffer(pc, in.cfg.SocketReadBuffer, in)
	return pc, nil
}

// removeStaleSocket removes a socket file that nobody listens on, which is
// what an agent that was killed leaves behind. A live socket or a file
// that is not a socket is an error: removing either would break something.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket: remove it or set line_unix to another path", path)
	}
	if c, err := net.Dial("unixgram", path); err == nil {
		c.Close()
		return fmt.Errorf("%s is in use by another process (another agent?)", path)
	}
	return os.Remove(path)
}
