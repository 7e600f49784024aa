package artifact_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

// storeUnderTest is a fresh, empty store plus raw access to what it holds,
// below the Store interface, to check what was written and to damage it.
type storeUnderTest struct {
	store artifact.Store
	// keys lists everything the store holds (temporary files included), as
	// keys relative to its root or prefix, sorted.
	keys func(t *testing.T) []string
	// put writes raw bytes at a key, as a broken disk or a stranger would.
	put func(t *testing.T, key string, b []byte)
	// remove deletes a key.
	remove func(t *testing.T, key string)
}

// sealed writes files into a new recorder dir and seals them under id, in
// the order given.
func sealed(t *testing.T, id string, files ...[2]string) (*record.Metadata, string) {
	t.Helper()
	dir := t.TempDir()
	md := newMetadata(id)
	for _, f := range files {
		writeFiles(t, dir, map[string]string{f[0]: f[1]})
		md.Files = append(md.Files, record.File{Name: f[0]})
	}
	if err := artifact.Seal(dir, md); err != nil {
		t.Fatal(err)
	}
	return md, dir
}

func readAll(t *testing.T, s artifact.Store, id, file string) (string, error) {
	t.Helper()
	rc, err := s.Open(context.Background(), id, file)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}

func objectKey(content string) string { return "objects/sha256/" + sha(content) }

// testStoreContract runs what every Store must do against stores made by
// open, one per subtest.
func testStoreContract(t *testing.T, open func(t *testing.T) storeUnderTest) {
	ctx := context.Background()

	t.Run("a put artifact reads back byte for byte", func(t *testing.T) {
		u := open(t)
		md, dir := sealed(t, "cap-1", [2]string{"perf.data.1", "pre-window dump"}, [2]string{"perf.data.2", "post-window dump"}, [2]string{"requests.jsonl", `{"latency_ns":1000000000}` + "\n"})
		md.Requests = "requests.jsonl"
		loc, err := u.store.Put(ctx, md, dir)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(loc.Metadata, "captures/cap-1.json") || len(loc.Files) != 3 || !strings.HasSuffix(loc.Files[1], objectKey("post-window dump")) {
			t.Errorf("Location = %+v", loc)
		}
		if loc.NewObjects != 3 || loc.NewBytes != md.Bytes {
			t.Errorf("Location counts %d objects, %d bytes written; want 3, %d", loc.NewObjects, loc.NewBytes, md.Bytes)
		}
		got, err := u.store.Get(ctx, "cap-1")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(md, got); diff != "" {
			t.Errorf("Get (-put +got):\n%s", diff)
		}
		for name, want := range map[string]string{"perf.data.1": "pre-window dump", "perf.data.2": "post-window dump", "requests.jsonl": `{"latency_ns":1000000000}` + "\n"} {
			if got, err := readAll(t, u.store, "cap-1", name); err != nil || got != want {
				t.Errorf("Open(%s) read %q, %v; want %q", name, got, err, want)
			}
		}
		list, err := u.store.List(ctx)
		if err != nil || len(list) != 1 || list[0].ID != "cap-1" {
			t.Errorf("List = %v, %v; want cap-1", list, err)
		}
		want := []string{"captures/cap-1.json", objectKey("post-window dump"), objectKey("pre-window dump"), objectKey(`{"latency_ns":1000000000}` + "\n")}
		slices.Sort(want)
		if diff := cmp.Diff(want, u.keys(t)); diff != "" {
			t.Errorf("keys (-want +got):\n%s", diff)
		}
	})

	t.Run("putting the same artifact again writes nothing and succeeds", func(t *testing.T) {
		u := open(t)
		md, dir := sealed(t, "cap-1", [2]string{"perf.data", "dump"})
		if _, err := u.store.Put(ctx, md, dir); err != nil {
			t.Fatal(err)
		}
		before := u.keys(t)
		// The same record, its times in another zone: equal records are
		// equal whatever zone they were made in.
		again := *md
		again.FiredAt = md.FiredAt.In(time.FixedZone("CET", 3600))
		loc, err := u.store.Put(ctx, &again, dir)
		if err != nil {
			t.Fatalf("second Put: %v", err)
		}
		if loc.NewObjects != 0 || loc.NewBytes != 0 {
			t.Errorf("second Put wrote %d objects, %d bytes; want none", loc.NewObjects, loc.NewBytes)
		}
		if diff := cmp.Diff(before, u.keys(t)); diff != "" {
			t.Errorf("keys changed (-before +after):\n%s", diff)
		}
	})

	t.Run("putting the same artifact again restores an object that went missing", func(t *testing.T) {
		u := open(t)
		md, dir := sealed(t, "cap-1", [2]string{"perf.data", "dump"}, [2]string{"trace.dat", "trace"})
		if _, err := u.store.Put(ctx, md, dir); err != nil {
			t.Fatal(err)
		}
		u.remove(t, objectKey("trace"))
		loc, err := u.store.Put(ctx, md, dir)
		if err != nil {
			t.Fatal(err)
		}
		if loc.NewObjects != 1 {
			t.Errorf("second Put wrote %d objects, want the missing one", loc.NewObjects)
		}
		if got, err := readAll(t, u.store, "cap-1", "trace.dat"); err != nil || got != "trace" {
			t.Errorf("Open(trace.dat) after the repair: %q, %v", got, err)
		}
	})

	t.Run("an id stored with other metadata is refused and left as it was", func(t *testing.T) {
		u := open(t)
		md, dir := sealed(t, "cap-1", [2]string{"perf.data", "dump"})
		if _, err := u.store.Put(ctx, md, dir); err != nil {
			t.Fatal(err)
		}
		before := u.keys(t)
		other := *md
		other.Host = "node-2"
		if _, err := u.store.Put(ctx, &other, dir); !errors.Is(err, artifact.ErrExists) {
			t.Errorf("Put with another host = %v, want ErrExists", err)
		}
		otherFiles, otherDir := sealed(t, "cap-1", [2]string{"perf.data", "another dump"})
		if _, err := u.store.Put(ctx, otherFiles, otherDir); !errors.Is(err, artifact.ErrExists) {
			t.Errorf("Put with other files = %v, want ErrExists", err)
		}
		if diff := cmp.Diff(before, u.keys(t)); diff != "" {
			t.Errorf("a refused Put wrote (-before +after):\n%s", diff)
		}
		if got, err := u.store.Get(ctx, "cap-1"); err != nil || got.Host != "node-1" {
			t.Errorf("Get after the refused Puts: host %v, %v; want node-1", got, err)
		}
	})

	t.Run("content already stored is not written again", func(t *testing.T) {
		u := open(t)
		a, dirA := sealed(t, "cap-a", [2]string{"perf.data", "shared"}, [2]string{"requests.jsonl", "a's requests"})
		b, dirB := sealed(t, "cap-b", [2]string{"trace.dat", "shared"}, [2]string{"requests.jsonl", "b's requests"}, [2]string{"copy.dat", "b's requests"})
		if _, err := u.store.Put(ctx, a, dirA); err != nil {
			t.Fatal(err)
		}
		loc, err := u.store.Put(ctx, b, dirB)
		if err != nil {
			t.Fatal(err)
		}
		if loc.NewObjects != 1 || loc.NewBytes != int64(len("b's requests")) {
			t.Errorf("Put of b wrote %d objects, %d bytes; want 1 (its requests, once), %d", loc.NewObjects, loc.NewBytes, len("b's requests"))
		}
		if got, err := readAll(t, u.store, "cap-b", "copy.dat"); err != nil || got != "b's requests" {
			t.Errorf("Open(cap-b, copy.dat) = %q, %v", got, err)
		}
	})

	t.Run("delete removes the record and only the objects no other capture uses", func(t *testing.T) {
		u := open(t)
		a, dirA := sealed(t, "cap-a", [2]string{"perf.data", "shared"}, [2]string{"requests.jsonl", "a's requests"})
		b, dirB := sealed(t, "cap-b", [2]string{"perf.data", "shared"})
		for _, p := range []struct {
			md  *record.Metadata
			dir string
		}{{a, dirA}, {b, dirB}} {
			if _, err := u.store.Put(ctx, p.md, p.dir); err != nil {
				t.Fatal(err)
			}
		}
		if err := u.store.Delete(ctx, "cap-a"); err != nil {
			t.Fatal(err)
		}
		if _, err := u.store.Get(ctx, "cap-a"); !errors.Is(err, artifact.ErrNotFound) {
			t.Errorf("Get of a deleted capture = %v, want ErrNotFound", err)
		}
		if got, err := readAll(t, u.store, "cap-b", "perf.data"); err != nil || got != "shared" {
			t.Errorf("the other capture's shared file: %q, %v", got, err)
		}
		if diff := cmp.Diff([]string{"captures/cap-b.json", objectKey("shared")}, u.keys(t)); diff != "" {
			t.Errorf("keys after Delete (-want +got):\n%s", diff)
		}
		if err := u.store.Delete(ctx, "cap-a"); !errors.Is(err, artifact.ErrNotFound) {
			t.Errorf("second Delete = %v, want ErrNotFound", err)
		}
		if err := u.store.Delete(ctx, "cap-b"); err != nil {
			t.Fatal(err)
		}
		if keys := u.keys(t); len(keys) != 0 {
			t.Errorf("keys after deleting everything: %v", keys)
		}
	})

	t.Run("ids and file names never become paths unchecked", func(t *testing.T) {
		u := open(t)
		md, dir := sealed(t, "cap-1", [2]string{"perf.data", "dump"})
		if _, err := u.store.Put(ctx, md, dir); err != nil {
			t.Fatal(err)
		}
		before := u.keys(t)
		badNames := []string{"", ".", "..", "../cap-1", "../../../../etc/passwd", "/etc/passwd", "a/b", `a\b`, "captures/cap-1", "x\x00y", "CAP-1", "-x", strings.Repeat("a", 129)}
		for _, bad := range badNames {
			if _, err := u.store.Get(ctx, bad); !errors.Is(err, record.ErrInvalid) {
				t.Errorf("Get(%q) = %v, want ErrInvalid", bad, err)
			}
			if _, err := u.store.Open(ctx, bad, "perf.data"); !errors.Is(err, record.ErrInvalid) {
				t.Errorf("Open(%q, perf.data) = %v, want ErrInvalid", bad, err)
			}
			if _, err := u.store.Open(ctx, "cap-1", bad); !errors.Is(err, record.ErrInvalid) {
				t.Errorf("Open(cap-1, %q) = %v, want ErrInvalid", bad, err)
			}
			if err := u.store.Delete(ctx, bad); !errors.Is(err, record.ErrInvalid) {
				t.Errorf("Delete(%q) = %v, want ErrInvalid", bad, err)
			}
			withID := *md
			withID.ID = bad
			if _, err := u.store.Put(ctx, &withID, dir); !errors.Is(err, record.ErrInvalid) {
				t.Errorf("Put with id %q = %v, want ErrInvalid", bad, err)
			}
		}
		if diff := cmp.Diff(before, u.keys(t)); diff != "" {
			t.Errorf("refused requests wrote (-before +after):\n%s", diff)
		}
	})

	t.Run("a record naming files outside the recorder dir is refused and nothing is written", func(t *testing.T) {
		u := open(t)
		secretDir := t.TempDir()
		writeFiles(t, secretDir, map[string]string{"secret": "private key"})
		_, dir := sealed(t, "cap-1", [2]string{"perf.data", "dump"})
		for _, name := range []string{"../secret", secretDir + "/secret", "sub/../../secret"} {
			// A record made by hand, its checksums those of the file it
			// points at, so only the name can stop it.
			md := newMetadata("cap-1")
			md.Version = record.MetadataVersion
			md.Files = []record.File{{Name: name, Bytes: int64(len("private key")), SHA256: sha("private key")}}
			md.Bytes = md.Files[0].Bytes
			md.Checksum = sha(md.Files[0].SHA256 + "\n")
			if _, err := u.store.Put(ctx, md, dir); !errors.Is(err, record.ErrInvalid) {
				t.Errorf("Put naming %q = %v, want ErrInvalid", name, err)
			}
		}
		if keys := u.keys(t); len(keys) != 0 {
			t.Errorf("refused Puts wrote %v", keys)
		}
	})

	t.Run("a symlink swapped into the recorder dir after Seal is refused and nothing is written", func(t *testing.T) {
		u := open(t)
		secret := t.TempDir() + "/secret"
		writeFiles(t, strings.TrimSuffix(secret, "/secret"), map[string]string{"secret": "dump"})
		md, dir := sealed(t, "cap-1", [2]string{"perf.data", "dump"})
		replaceWithSymlink(t, dir+"/perf.data", secret)
		_, err := u.store.Put(ctx, md, dir)
		if !errors.Is(err, record.ErrInvalid) || !strings.Contains(err.Error(), "symlink") {
			t.Errorf("Put = %v, want ErrInvalid naming the symlink", err)
		}
		if keys := u.keys(t); len(keys) != 0 {
			t.Errorf("a refused Put wrote %v", keys)
		}
	})

	t.Run("a file changed after Seal fails the put and leaves no record", func(t *testing.T) {
		u := open(t)
		md, dir := sealed(t, "cap-1", [2]string{"perf.data", "dump-1"})
		writeFiles(t, dir, map[string]string{"perf.data": "dump-2"}) // same size
		if _, err := u.store.Put(ctx, md, dir); !errors.Is(err, record.ErrInvalid) || !strings.Contains(err.Error(), "changed after it was sealed") {
			t.Errorf("Put = %v, want ErrInvalid saying the file changed", err)
		}
		writeFiles(t, dir, map[string]string{"perf.data": "dump-1 and more"})
		if _, err := u.store.Put(ctx, md, dir); !errors.Is(err, record.ErrInvalid) {
			t.Errorf("Put of a grown file = %v, want ErrInvalid", err)
		}
		if keys := u.keys(t); len(keys) != 0 {
			t.Errorf("failed Puts wrote %v", keys)
		}
		if _, err := u.store.Get(ctx, "cap-1"); !errors.Is(err, artifact.ErrNotFound) {
			t.Errorf("Get = %v, want ErrNotFound", err)
		}
	})

	t.Run("stored data that does not match its record is reported, never returned as good", func(t *testing.T) {
		u := open(t)
		md, dir := sealed(t, "cap-1", [2]string{"perf.data", "good dump"}, [2]string{"other.data", "other"})
		if _, err := u.store.Put(ctx, md, dir); err != nil {
			t.Fatal(err)
		}
		u.put(t, objectKey("good dump"), []byte("evil dump"))
		if _, err := readAll(t, u.store, "cap-1", "perf.data"); !errors.Is(err, record.ErrCorrupt) {
			t.Errorf("reading a damaged object: %v, want ErrCorrupt", err)
		}
		u.remove(t, objectKey("other"))
		if _, err := readAll(t, u.store, "cap-1", "other.data"); !errors.Is(err, record.ErrCorrupt) {
			t.Errorf("opening a missing object: %v, want ErrCorrupt", err)
		}

		u.put(t, "captures/broken.json", []byte(`{"version":1,"id":"broken"`))
		u.put(t, "captures/stolen.json", []byte(mustRecord(t, u.store, "cap-1")))
		u.put(t, "captures/NOT-A-CAPTURE", []byte("x"))
		for _, id := range []string{"broken", "stolen"} {
			if _, err := u.store.Get(ctx, id); !errors.Is(err, record.ErrCorrupt) {
				t.Errorf("Get(%s) = %v, want ErrCorrupt", id, err)
			}
		}
		list, err := u.store.List(ctx)
		if !errors.Is(err, record.ErrCorrupt) {
			t.Errorf("List error = %v, want one wrapping ErrCorrupt", err)
		}
		for _, name := range []string{"broken", "stolen", "NOT-A-CAPTURE"} {
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("List error %v does not name %s", err, name)
			}
		}
		if len(list) != 1 || list[0].ID != "cap-1" {
			t.Errorf("List returned %d records, want the readable cap-1", len(list))
		}
	})

	t.Run("unknown captures and files are not found", func(t *testing.T) {
		u := open(t)
		md, dir := sealed(t, "cap-1", [2]string{"perf.data", "dump"})
		if _, err := u.store.Put(ctx, md, dir); err != nil {
			t.Fatal(err)
		}
		if _, err := u.store.Get(ctx, "cap-2"); !errors.Is(err, artifact.ErrNotFound) {
			t.Errorf("Get(cap-2) = %v, want ErrNotFound", err)
		}
		if _, err := u.store.Open(ctx, "cap-1", "trace.dat"); !errors.Is(err, artifact.ErrNotFound) {
			t.Errorf("Open(cap-1, trace.dat) = %v, want ErrNotFound", err)
		}
		if err := u.store.Delete(ctx, "cap-2"); !errors.Is(err, artifact.ErrNotFound) {
			t.Errorf("Delete(cap-2) = %v, want ErrNotFound", err)
		}
	})
}

// mustRecord returns the stored record of id, re-encoded.
func mustRecord(t *testing.T, s artifact.Store, id string) string {
	t.Helper()
	md, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(md)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// replaceWithSymlink swaps file for a symlink to target.
func replaceWithSymlink(t *testing.T, file, target string) {
	t.Helper()
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	symlink(t, target, file)
}
