//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package spool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive flock on dir/lock, so that two agents (say,
// the old and the new pod of a DaemonSet rollout) never write one spool.
// The kernel drops the lock when the process dies.
func lockDir(dir string) (unlock func() error, err error) {
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked: stop the other agent or give this one its own spool directory", ErrLocked, path)
		}
		return nil, fmt.Errorf("spool: flock %s: %w", path, err)
	}
	return f.Close, nil
}

// syncDirectory fsyncs dir, which makes the creation, deletion and renaming
// of the files in it durable.
func syncDirectory(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
