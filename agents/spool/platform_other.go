//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package spool

// lockDir does not lock here: the standard library has no file lock on
// these systems (Windows, Solaris, …). Do not point two agents at one Dir.
func lockDir(string) (unlock func() error, err error) {
	return func() error { return nil }, nil
}

// syncDirectory does nothing here: Windows cannot fsync a directory handle
// (NTFS journals its metadata), and the rest lack a portable way.
func syncDirectory(string) error { return nil }
