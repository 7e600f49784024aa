package collect

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestFileCacheRereadsOpenFiles(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "operstate")
	if err := os.WriteFile(p, []byte("up\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var c fileCache
	defer c.Close()
	var buf []byte
	steps := []struct {
		name    string
		prepare func()
		want    string
	}{
		{"the first read opens the file", func() {}, "up\n"},
		{"a changed file is read afresh through the cached descriptor", func() { os.WriteFile(p, []byte("down\n"), 0o644) }, "down\n"},
		{"a descriptor that fails is replaced by a fresh open", func() { c.Close(); c.files = map[string]*cachedFile{p: {fd: -1, used: c.pass}} }, "down\n"},
	}
	for _, st := range steps {
		st.prepare()
		var err error
		if buf, err = c.read(p, buf); err != nil || string(buf) != st.want {
			t.Errorf("%s: read = %q, %v; want %q", st.name, buf, err, st.want)
		}
	}
	c.sweep()
	c.sweep() // the file was not read in between: closed
	if len(c.files) != 0 {
		t.Errorf("after a pass without reading it, %d files still open", len(c.files))
	}
}

func TestFileCacheReportsMissingFilesAsNotSupported(t *testing.T) {
	var c fileCache
	_, err := c.read(filepath.Join(t.TempDir(), "pressure", "cpu"), nil)
	if !errors.Is(err, ErrNotSupported) {
		t.Errorf("read of a missing file = %v, want ErrNotSupported", err)
	}
}

// readRecord returns what read does, for a file shorter than the buffer,
// one exactly as long and one longer.
func TestFileCacheReadRecordReadsWholeFiles(t *testing.T) {
	dir := t.TempDir()
	var c fileCache
	defer c.Close()
	for _, size := range []int{10, 4096, 10000} {
		p := filepath.Join(dir, fmt.Sprint(size))
		want := bytes.Repeat([]byte("x"), size)
		if err := os.WriteFile(p, want, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := c.readRecord(p, nil)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("readRecord of %d bytes = %d bytes, %v", size, len(got), err)
		}
	}
}

// readOnce reads what os.ReadFile reads, whatever the buffer it is given,
// keeps no descriptor, and reports a missing file as read does.
func TestReadOnceReadsWholeFilesAndKeepsNoneOpen(t *testing.T) {
	dir := t.TempDir()
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := fds()
	buf := make([]byte, 0, 16)
	for _, size := range []int{0, 10, 16, 4096, 10000} {
		p := filepath.Join(dir, fmt.Sprint(size))
		want := bytes.Repeat([]byte("y"), size)
		if err := os.WriteFile(p, want, 0o644); err != nil {
			t.Fatal(err)
		}
		var err error
		if buf, err = readOnce(p, buf); err != nil || !bytes.Equal(buf, want) {
			t.Errorf("readOnce of %d bytes = %d bytes, %v", size, len(buf), err)
		}
	}
	if after := fds(); after != before {
		t.Errorf("%d descriptors open after the reads, %d before", after, before)
	}
	if _, err := readOnce(filepath.Join(dir, "cpu.max"), buf); !errors.Is(err, ErrNotSupported) {
		t.Errorf("readOnce of a missing file = %v, want ErrNotSupported", err)
	}
}

// A reader's hold on a cached file reads it without the path until the
// cache closes the file; then the hold is renewed from the path, and never
// reads the descriptor number the kernel has since given another file.
func TestFileCacheHeldReadsFollowTheCache(t *testing.T) {
	dir := t.TempDir()
	p, other := filepath.Join(dir, "cpu.stat"), filepath.Join(dir, "other")
	for _, f := range []string{p, other} {
		if err := os.WriteFile(f, []byte(filepath.Base(f)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var c fileCache
	defer c.Close()
	var held *cachedFile
	read := func(step string) {
		t.Helper()
		got, err := c.readRecordHeld(&held, p, nil)
		if err != nil || string(got) != "cpu.stat\n" {
			t.Errorf("%s: read = %q, %v; want the file's content", step, got, err)
		}
		if held == nil || held != c.files[p] {
			t.Errorf("%s: the hold is not the cache's file", step)
		}
	}
	read("the first read opens the file")
	first := held
	c.sweep()
	read("a read through the hold")
	if held != first {
		t.Errorf("a read through an open hold reopened the file")
	}
	c.sweep()
	c.sweep() // not read in a pass: closed
	if first.fd != -1 {
		t.Fatalf("the swept file's descriptor is %d, want -1", first.fd)
	}
	var o *cachedFile
	if _, err := c.readRecordHeld(&o, other, nil); err != nil { // likely takes the freed descriptor number
		t.Fatal(err)
	}
	read("a read after the cache closed the file")
	if held == first {
		t.Errorf("the hold was not renewed after the file was closed")
	}
}
