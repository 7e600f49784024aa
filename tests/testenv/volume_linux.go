package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// MountTmpfs mounts a tmpfs of size ("64m", "2g") on a new folder name
// under base and unmounts it when t ends: a volume a test can fill up.
// Mounting needs root; without it the test ends as RequirePrivileged
// says.
func MountTmpfs(t testing.TB, base, name, size string) string {
	t.Helper()
	dir := filepath.Join(base, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0755"); err != nil {
		if errors.Is(err, syscall.EPERM) {
			RequirePrivileged(t, "mounting a tmpfs (root)", err)
		}
		t.Fatalf("mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// FillDisk writes the file name until its file system is full (ENOSPC)
// and says how many bytes it wrote.
func FillDisk(name string) (int64, error) {
	f, err := os.Create(name)
	if err != nil {
		return 0, fmt.Errorf("fill: %w", err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		w, err := f.Write(buf)
		n += int64(w)
		if err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return n, nil
			}
			return n, fmt.Errorf("fill %s: %w", name, err)
		}
	}
}
