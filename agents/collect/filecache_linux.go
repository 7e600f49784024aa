package collect

import "golang.org/x/sys/unix"

// fileCache keeps the files a sampler reads open between passes and
// re-reads them from offset 0 with pread. procfs and sysfs regenerate a
// file's content on every read at offset 0 (seq_file restarts its
// iterator), so this returns the same fresh data as open+read+close while
// saving the path walk: opening /sys/class/net/<if>/operstate costs ~10×
// reading it, and a Kubernetes node has an interface per pod.
//
// A file that fails to read (its interface was deleted: ENODEV) is closed
// and opened again once, so that a new object of the same name is picked
// up. Files not read during a pass are closed by sweep. A fileCache is not
// safe for concurrent use; each sampler owns one.
type fileCache struct {
	files map[string]*cachedFile
	pass  uint64
}

type cachedFile struct {
	fd   int    // -1 once the cache has closed it
	used uint64 // pass of the last read
}

// close closes the descriptor and marks the file closed for the readers
// that hold it (readRecordHeld): its number may be reused by the next open.
func (f *cachedFile) close() {
	unix.Close(f.fd)
	f.fd = -1
}

// read fills buf with the file's current content and returns it; the
// caller owns the result until its next call with the same buf.
func (c *fileCache) read(path string, buf []byte) ([]byte, error) {
	return c.readWith(path, buf, preadAll)
}

// readRecord is read for a file the kernel prints as one seq_file record,
// as kernfs does every cgroup file (one show() call): seq_file hands a
// read all of a record that fits, so a read that comes back short of the
// buffer has the whole file, and the second, empty read that read makes
// to see the end is saved. A cgroup pass reads hundreds of such files.
func (c *fileCache) readRecord(path string, buf []byte) ([]byte, error) {
	return c.readWith(path, buf, preadRecord)
}

// readRecordHeld is readRecord through *h, the caller's hold on the
// path's cached file, which saves hashing the path on each read: a cgroup
// pass reads hundreds of long paths. *h starts nil and is refreshed
// whenever the cache had to (re)open the file: after a sweep or a failed
// read closed it.
func (c *fileCache) readRecordHeld(h **cachedFile, path string, buf []byte) ([]byte, error) {
	if f := *h; f != nil && f.fd >= 0 {
		if out, err := preadRecord(f.fd, buf); err == nil {
			f.used = c.pass
			return out, nil
		}
	}
	out, err := c.readRecord(path, buf)
	*h = c.files[path] // nil after a failure
	return out, err
}

func (c *fileCache) readWith(path string, buf []byte, preadAll func(int, []byte) ([]byte, error)) ([]byte, error) {
	if c.files == nil {
		c.files = map[string]*cachedFile{}
	}
	f := c.files[path]
	if f != nil {
		out, err := preadAll(f.fd, buf)
		if err == nil {
			f.used = c.pass
			return out, nil
		}
		f.close()
		delete(c.files, path)
	}
	fd, err := openRead(path)
	if err != nil {
		return buf[:0], readError(path, err)
	}
	out, err := preadAll(fd, buf)
	if err != nil {
		unix.Close(fd)
		return out, readError(path, err)
	}
	c.files[path] = &cachedFile{fd: fd, used: c.pass}
	return out, nil
}

// sweep ends a pass: files not read since the previous sweep are closed.
func (c *fileCache) sweep() {
	for path, f := range c.files {
		if f.used != c.pass {
			f.close()
			delete(c.files, path)
		}
	}
	c.pass++
}

// Close closes every cached file.
func (c *fileCache) Close() error {
	for path, f := range c.files {
		f.close()
		delete(c.files, path)
	}
	return nil
}

func preadAll(fd int, buf []byte) ([]byte, error) {
	buf = buf[:0]
	for {
		buf = growForRead(buf)
		n, err := unix.Pread(fd, buf[len(buf):cap(buf)], int64(len(buf)))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return buf, err
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// preadRecord reads a one-record file: one pread when it comes back short
// of the buffer, preadAll's loop when it filled it.
func preadRecord(fd int, buf []byte) ([]byte, error) {
	buf = growForRead(buf[:0])
	for {
		n, err := unix.Pread(fd, buf[:cap(buf)], 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return buf[:0], err
		}
		if n < cap(buf) {
			return buf[:n], nil
		}
		return preadAll(fd, buf)
	}
}

// readOnce reads a one-record file that is read too rarely to keep open
// (a cgroup's quota, read once a walk): open, one pread, close.
// os.ReadFile makes twice the calls for such a file (it also stats it,
// offers it to the poller and reads again to see the end), and a walk
// over hundreds of cgroups pays them for each of their settings. The
// caller owns the result until its next call with the same buf.
func readOnce(path string, buf []byte) ([]byte, error) {
	fd, err := openRead(path)
	if err != nil {
		return buf[:0], readError(path, err)
	}
	defer unix.Close(fd)
	out, err := preadRecord(fd, buf)
	if err != nil {
		return out, readError(path, err)
	}
	return out, nil
}

func openRead(path string) (int, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}
