package artifact_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
)

func openLocal(t *testing.T) storeUnderTest {
	t.Helper()
	root := t.TempDir()
	s, err := artifact.OpenLocalStore(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return storeUnderTest{
		store: s,
		keys:  func(t *testing.T) []string { return localKeys(t, root) },
		put: func(t *testing.T, key string, b []byte) {
			if err := os.WriteFile(filepath.Join(root, key), b, 0o640); err != nil {
				t.Fatal(err)
			}
		},
		remove: func(t *testing.T, key string) {
			if err := os.Remove(filepath.Join(root, key)); err != nil {
				t.Fatal(err)
			}
		},
	}
}

// localKeys lists every non-folder under root, temporary files included.
func localKeys(t *testing.T, root string) []string {
	t.Helper()
	keys := []string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		keys = append(keys, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

func TestStoreLocal(t *testing.T) {
	testStoreContract(t, openLocal)
}

func TestStoreLocalWritesFilesOnlyTheAgentAndItsGroupCanRead(t *testing.T) {
	root := t.TempDir()
	s, err := artifact.OpenLocalStore(root)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	md, dir := sealed(t, "cap-1", [2]string{"perf.data", "dump"})
	if _, err := s.Put(context.Background(), md, dir); err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		limit := os.FileMode(0o640)
		if d.IsDir() {
			limit = 0o750
		}
		if extra := fi.Mode().Perm() &^ limit; extra != 0 {
			t.Errorf("%s has mode %v, more than %v", path, fi.Mode().Perm(), limit)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestStoreLocalFollowsNoSymlinkOutOfItsFolder(t *testing.T) {
	ctx := context.Background()
	outside := t.TempDir()

	t.Run("a record planted as a symlink to a file outside is not read", func(t *testing.T) {
		root := t.TempDir()
		s, err := artifact.OpenLocalStore(root)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		md, dir := sealed(t, "cap-1", [2]string{"perf.data", "dump"})
		if _, err := s.Put(ctx, md, dir); err != nil {
			t.Fatal(err)
		}
		// A valid record, but outside the store.
		if err := os.Rename(filepath.Join(root, "captures", "cap-1.json"), filepath.Join(outside, "cap-1.json")); err != nil {
			t.Fatal(err)
		}
		symlink(t, filepath.Join(outside, "cap-1.json"), filepath.Join(root, "captures", "cap-1.json"))
		if _, err := s.Get(ctx, "cap-1"); err == nil || !strings.Contains(err.Error(), "escapes") {
			t.Errorf("Get through a symlink out of the store = %v, want an error saying the path escapes", err)
		}
	})

	t.Run("an objects folder swapped for a symlink outside takes no write", func(t *testing.T) {
		root := t.TempDir()
		s, err := artifact.OpenLocalStore(root)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		target := filepath.Join(outside, "objects")
		mkdir(t, target)
		if err := os.RemoveAll(filepath.Join(root, "objects")); err != nil {
			t.Fatal(err)
		}
		symlink(t, target, filepath.Join(root, "objects"))
		md, dir := sealed(t, "cap-1", [2]string{"perf.data", "dump"})
		if _, err := s.Put(ctx, md, dir); err == nil {
			t.Error("Put through a symlinked objects folder succeeded")
		}
		if keys := localKeys(t, outside); slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, "objects/") }) {
			t.Errorf("Put wrote outside the store: %v", keys)
		}
		if _, err := s.Get(ctx, "cap-1"); !errors.Is(err, artifact.ErrNotFound) {
			t.Errorf("Get = %v: the record must not be written when its objects were not", err)
		}
	})
}

func TestStoreLocalOpenNeedsAnExistingAbsoluteFolder(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	writeFiles(t, filepath.Dir(file), map[string]string{"file": "x"})
	for name, tt := range map[string]struct{ dir, mention string }{
		"a relative path":   {"captures", "absolute"},
		"a missing folder":  {filepath.Join(t.TempDir(), "unmounted"), "mount the capture volume"},
		"a file, no folder": {file, "not a folder"},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := artifact.OpenLocalStore(tt.dir)
			if err == nil {
				s.Close()
				t.Fatal("OpenLocalStore succeeded")
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("error %q does not mention %q", err, tt.mention)
			}
		})
	}
}

func TestStoreLocalOpenRemovesTemporaryFilesLeftByACrashedPut(t *testing.T) {
	root := t.TempDir()
	s, err := artifact.OpenLocalStore(root)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	writeFiles(t, filepath.Join(root, "tmp"), map[string]string{"OLD": "crashed", "NEW": "a Put running now"})
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(root, "tmp", "OLD"), old, old); err != nil {
		t.Fatal(err)
	}
	s, err = artifact.OpenLocalStore(root)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := localKeys(t, root); !slices.Equal(got, []string{"tmp/NEW"}) {
		t.Errorf("files after reopening: %v, want only tmp/NEW", got)
	}
}
