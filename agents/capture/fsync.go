package capture

import (
	"errors"
	"os"
	"syscall"
)

// SyncDir makes a new file's directory entry durable: a recorder calls
// it after writing a file the engine will seal.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}
