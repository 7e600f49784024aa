package artifacts

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/captures"
	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	spikehunt "github.com/spikehunt/spikehunt/pipelines/cli"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopShared()
	os.Exit(code)
}

// files are a capture's files as a recorder leaves them.
var files = map[string]string{
	"perf.data.1":    strings.Repeat("pre-window ring dump ", 5000),
	"perf.data.2":    "post-window ring dump",
	"requests.jsonl": `{"latency_ns":1000000000}` + "\n",
}

// indexed is a migrated store whose captures index holds the capture that
// was put in an artifact store.
type indexed struct {
	dsn string
	st  store.Store
	md  *record.Metadata
	loc artifact.Location
}

// putAndIndex seals files as capture id, puts them in s and indexes the
// capture in a fresh store, as the agent and the operator do.
func putAndIndex(t *testing.T, s artifact.Store, id string) indexed {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	fired := time.Now().UTC().Truncate(time.Second).Add(-time.Hour)
	md := &record.Metadata{ID: id, Host: "node-1", Backend: "perf", ArmedAt: fired.Add(-time.Minute), FiredAt: fired,
		WindowStart: fired.Add(-5 * time.Second), WindowEnd: fired.Add(2 * time.Second),
		Trigger: record.FireCause{Kind: "latency", Service: "checkout", Latency: time.Second}, Requests: "requests.jsonl"}
	for _, name := range []string{"perf.data.1", "perf.data.2", "requests.jsonl"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(files[name]), 0o644); err != nil {
			t.Fatal(err)
		}
		md.Files = append(md.Files, record.File{Name: name})
	}
	if err := artifact.Seal(dir, md); err != nil {
		t.Fatal(err)
	}
	loc, err := s.Put(ctx, md, dir)
	if err != nil {
		t.Fatal(err)
	}
	st := testenv.ClickHouse(t)
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := captures.Index(ctx, st, captures.Capture{ID: id, Host: "node-1", Node: "node-1", Backend: "perf",
		WindowStart: md.WindowStart, WindowEnd: md.WindowEnd, URI: loc.Metadata, Bytes: uint64(md.Bytes), Checksum: md.Checksum}); err != nil {
		t.Fatal(err)
	}
	return indexed{dsn: "chdb://" + st.Dir() + "?database=" + st.Database(), st: st, md: md, loc: loc}
}

func get(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errs bytes.Buffer
	err := Get(context.Background(), args, &out, &errs)
	return out.String(), errs.String(), err
}

// sameFiles checks that dir holds the capture's files byte for byte and
// its record.
func sameFiles(t *testing.T, dir string, md *record.Metadata) {
	t.Helper()
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != want {
			t.Errorf("%s: %d bytes (%v), want the %d bytes put", name, len(got), err, len(want))
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "metadata.json"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := record.DecodeMetadata(b)
	if err != nil || got.Checksum != md.Checksum || len(got.Files) != 3 {
		t.Errorf("metadata.json: %+v (%v), want the record with checksum %s", got, err, md.Checksum)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 4 {
		t.Errorf("%s holds %d entries, want the 3 files and metadata.json (no temporary files left)", dir, len(ents))
	}
}

func TestCapturesGetDownloadsAndVerifiesACaptureFromAFolderStore(t *testing.T) {
	storeDir := t.TempDir()
	s, err := artifact.OpenLocalStore(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	x := putAndIndex(t, s, "cap-20261126-node-1-a1")
	out := filepath.Join(t.TempDir(), "got")

	stdout, progress, err := get(t, "--dsn", x.dsn, "--out", out, "cap-20261126-node") // a unique prefix
	if err != nil {
		t.Fatal(err)
	}
	sameFiles(t, out, x.md)
	if !strings.Contains(stdout, "capture cap-20261126-node-1-a1: 3 files") || !strings.Contains(stdout, "sha256 verified, from file://") {
		t.Errorf("stdout %q", stdout)
	}
	if strings.Count(progress, " ok\n") != 3 {
		t.Errorf("progress %q, want a line per file", progress)
	}

	t.Run("a folder with files in it is refused, and left as it was", func(t *testing.T) {
		_, _, err := get(t, "--dsn", x.dsn, "--out", out, "cap-20261126-node-1-a1")
		if err == nil || !strings.Contains(err.Error(), "is not empty") {
			t.Fatalf("err %v, want a refusal to overwrite", err)
		}
		sameFiles(t, out, x.md)
	})

	t.Run("a copy of the node's folder is read with --store-dir", func(t *testing.T) {
		cp := t.TempDir()
		if err := os.CopyFS(cp, os.DirFS(storeDir)); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "copy")
		stdout, _, err := get(t, "--dsn", x.dsn, "--out", out, "--store-dir", cp, "cap-20261126-node-1-a1")
		if err != nil {
			t.Fatal(err)
		}
		sameFiles(t, out, x.md)
		if !strings.Contains(stdout, "sha256 verified, from "+cp+", in ") {
			t.Errorf("stdout %q, want it to say it read %s", stdout, cp)
		}
	})

	t.Run("a stored file that changed is not kept, and the error names it", func(t *testing.T) {
		var perf record.File
		for _, f := range x.md.Files {
			if f.Name == "perf.data.1" {
				perf = f
			}
		}
		obj := filepath.Join(storeDir, "objects", "sha256", perf.SHA256)
		b, err := os.ReadFile(obj)
		if err != nil {
			t.Fatal(err)
		}
		b[100] ^= 0xff
		os.Chmod(obj, 0o644)
		if err := os.WriteFile(obj, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "bad")
		_, _, err = get(t, "--dsn", x.dsn, "--out", out, "cap-20261126-node-1-a1")
		if !errors.Is(err, record.ErrCorrupt) || !strings.Contains(err.Error(), "perf.data.1") {
			t.Fatalf("err %v, want ErrCorrupt naming perf.data.1", err)
		}
		if _, err := os.Stat(filepath.Join(out, "perf.data.1")); !os.IsNotExist(err) {
			t.Errorf("the corrupt file was kept in %s (%v)", out, err)
		}
	})
}

func TestCapturesGetDownloadsAndVerifiesACaptureFromS3(t *testing.T) {
	srv := testenv.S3(t)
	t.Setenv("TEST_S3_ACCESS", srv.AccessKey)
	t.Setenv("TEST_S3_SECRET", srv.SecretKey)
	cfg := artifact.S3StoreConfig{Endpoint: srv.Endpoint, Region: srv.Region, Bucket: srv.Bucket, Prefix: "fleet/eu-1/",
		AccessKeyEnv: "TEST_S3_ACCESS", SecretKeyEnv: "TEST_S3_SECRET", Insecure: true}
	s, err := artifact.OpenS3Store(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	x := putAndIndex(t, s, "cap-s3-1")
	if !strings.HasPrefix(x.loc.Metadata, "s3://"+srv.Bucket+"/fleet/eu-1/captures/") {
		t.Fatalf("the agent's URI is %s", x.loc.Metadata)
	}
	out := filepath.Join(t.TempDir(), "got")
	s3 := []string{"--s3.endpoint", srv.Endpoint, "--s3.region", srv.Region, "--s3.insecure",
		"--s3.access-key-env", "TEST_S3_ACCESS", "--s3.secret-key-env", "TEST_S3_SECRET"}
	if _, _, err := get(t, append(append([]string{"--dsn", x.dsn, "--out", out}, s3...), "cap-s3-1")...); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, out, x.md)

	t.Run("without the server's address it says which flag to give", func(t *testing.T) {
		_, _, err := get(t, "--dsn", x.dsn, "--out", t.TempDir(), "cap-s3-1")
		if err == nil || !strings.Contains(err.Error(), "--s3.endpoint") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("wrong keys are the server's refusal, and nothing is written", func(t *testing.T) {
		t.Setenv("TEST_S3_SECRET", "not-the-secret")
		out := filepath.Join(t.TempDir(), "refused")
		_, _, err := get(t, append(append([]string{"--dsn", x.dsn, "--out", out}, s3...), "cap-s3-1")...)
		if err == nil {
			t.Fatal("fetched with a wrong secret key")
		}
		if ents, _ := os.ReadDir(out); len(ents) != 0 {
			t.Errorf("%d files written", len(ents))
		}
	})
}

func TestCapturesGetSaysWhatIsWrongWithTheId(t *testing.T) {
	s, err := artifact.OpenLocalStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	x := putAndIndex(t, s, "cap-a-1")
	ctx := context.Background()
	if _, err := captures.Index(ctx, x.st, captures.Capture{ID: "cap-a-2", Host: "node-1", Backend: "perf",
		WindowStart: x.md.WindowStart, WindowEnd: x.md.WindowEnd}); err != nil {
		t.Fatal(err)
	}
	if _, err := captures.Index(ctx, x.st, captures.Capture{ID: "cap-b-1", Host: "node-1", Backend: "perf",
		WindowStart: x.md.WindowStart, WindowEnd: x.md.WindowEnd, URI: "s3://bucket/other/cap-b-1", Checksum: "x"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id, want string
		is       error
	}{
		{"cap-a", `"cap-a" starts cap-a-1, cap-a-2`, captures.ErrAmbiguous},
		{"cap-z", `no capture id is or starts with "cap-z"`, captures.ErrNotFound},
		{"cap-a-2", "has no artifact yet", nil},
		{"cap-b-1", "does not name a capture record", nil},
	} {
		_, _, err := get(t, "--dsn", x.dsn, "--out", t.TempDir(), c.id)
		if err == nil || !strings.Contains(err.Error(), c.want) || (c.is != nil && !errors.Is(err, c.is)) {
			t.Errorf("captures get %s: %v, want %q", c.id, err, c.want)
		}
	}
	if _, _, err := get(t, "--dsn", x.dsn); !errors.Is(err, spikehunt.ErrUsage) {
		t.Errorf("no id: %v, want a usage error", err)
	}
}

func TestSourceOfReadsTheAgentsURIsAndRefusesOthers(t *testing.T) {
	s3 := S3Flags{Endpoint: "minio:9000", AccessEnv: "A", SecretEnv: "S"}
	for _, c := range []struct {
		uri, id, dir, bucket, prefix, err string
	}{
		{uri: "file:///var/lib/spikehunt/captures/captures/cap-1.json", id: "cap-1", dir: "/var/lib/spikehunt/captures"},
		{uri: "s3://spikehunt/captures/cap-1.json", id: "cap-1", bucket: "spikehunt", prefix: ""},
		{uri: "s3://spikehunt/prod/eu/captures/cap-1.json", id: "cap-1", bucket: "spikehunt", prefix: "prod/eu/"},
		{uri: "s3://spikehunt/prod/eu/objects/sha256/ab", err: "does not name a capture record"},
		{uri: "file:///x/captures/../etc.json", err: "does not name a capture record"},
		{uri: "https://example.com/captures/cap-1.json", err: `scheme "https"`},
		{uri: "file://node-7/var/captures/cap-1.json", err: "copy its folder here"},
	} {
		src, err := sourceOf(c.uri, s3)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want %q", c.uri, err, c.err)
			}
		case err != nil:
			t.Errorf("%s: %v", c.uri, err)
		case src.id != c.id:
			t.Errorf("%s: id %q", c.uri, src.id)
		case c.dir != "" && (src.cfg.Local == nil || src.cfg.Local.Dir != c.dir):
			t.Errorf("%s: %+v, want dir %s", c.uri, src.cfg.Local, c.dir)
		case c.bucket != "" && (src.cfg.S3 == nil || src.cfg.S3.Bucket != c.bucket || src.cfg.S3.Prefix != c.prefix || src.cfg.S3.AccessKeyEnv != "A"):
			t.Errorf("%s: %+v", c.uri, src.cfg.S3)
		}
	}
}
