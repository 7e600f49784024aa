package collect

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
)

// ErrNotSupported is wrapped by a sampler's error when the kernel lacks the
// source (no /proc/pressure before 4.20, no /proc/schedstat without
// CONFIG_SCHEDSTATS). The Collector reports it once and keeps running.
var ErrNotSupported = errors.New("not supported by this kernel")

// readError wraps a read failure; a missing file or an unsupported
// operation means the kernel lacks the feature.
func readError(path string, err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EOPNOTSUPP) {
		return fmt.Errorf("read %s: %w (%w)", path, ErrNotSupported, err)
	}
	return fmt.Errorf("read %s: %w", path, err)
}

// growForRead makes room for at least one more read into buf.
func growForRead(buf []byte) []byte {
	if cap(buf) == 0 {
		return make([]byte, 0, 4096)
	}
	if len(buf) == cap(buf) {
		return append(buf, 0)[:len(buf)]
	}
	return buf
}
