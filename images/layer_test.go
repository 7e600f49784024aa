package images

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// The same inputs give the same layer, whatever the host files' own
// mtimes, and every header carries the spec's mtime and no owner names;
// one changed byte gives another digest.
func TestALayerIsTheSameBytesForTheSameInputs(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("#!tool\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	epoch := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC) // fixed date: a layer's file times, never stored
	spec := func() LayerSpec {
		return LayerSpec{
			CreatedBy: "test",
			ModTime:   epoch,
			Entries: []Entry{
				{Path: "usr/local/bin/tool", Type: tar.TypeReg, Mode: 0o755, Source: bin},
				{Path: "/etc/passwd", Type: tar.TypeReg, Mode: 0o644, Data: []byte("root:x:0:0::/:/x\n")},
				{Path: "home/nonroot", Type: tar.TypeDir, Mode: 0o700, UID: NonRoot, GID: NonRoot},
				{Path: "bin", Type: tar.TypeSymlink, Mode: 0o777, Link: "usr/local/bin"},
			},
		}
	}
	first, err := layerCache{dir: filepath.Join(dir, "a")}.build(spec())
	if err != nil {
		t.Fatal(err)
	}
	// Another cache (nothing reused), and the source touched.
	if err := os.Chtimes(bin, time.Now(), time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	second, err := layerCache{dir: filepath.Join(dir, "b")}.build(spec())
	if err != nil {
		t.Fatal(err)
	}
	if first.digest != second.digest || first.diffID != second.diffID {
		t.Errorf("two builds of the same inputs: %s and %s", first.digest, second.digest)
	}

	rc, err := second.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if !h.ModTime.Equal(epoch) || h.Uname != "" || h.Gname != "" || !h.AccessTime.IsZero() {
			t.Errorf("%s: mtime %v, owner %q:%q, atime %v; want %v and no names", h.Name, h.ModTime, h.Uname, h.Gname, h.AccessTime, epoch)
		}
		if h.Name == "home/nonroot/" && (h.Uid != NonRoot || h.Gid != NonRoot || h.Mode != 0o700) {
			t.Errorf("home/nonroot/: %d:%d %o, want 65532:65532 700", h.Uid, h.Gid, h.Mode)
		}
	}
	// Sorted, with the parents the entries did not list.
	want := []string{"bin", "etc/", "etc/passwd", "home/", "home/nonroot/", "usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/tool"}
	if d := cmp.Diff(want, names); d != "" {
		t.Errorf("members (-want +got):\n%s", d)
	}

	if err := os.WriteFile(bin, []byte("#!tool2\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	changed, err := layerCache{dir: filepath.Join(dir, "a")}.build(spec())
	if err != nil {
		t.Fatal(err)
	}
	if changed.digest == first.digest {
		t.Errorf("a changed input kept digest %s: the cache key missed it", first.digest)
	}
}

// An archive is an OCI image layout that go-containerregistry reads back
// and validates (every digest and size checked), named for containerd and
// for OCI tools; writing the same image again leaves the file alone.
func TestAnArchiveIsAValidOCILayoutNamedForContainerd(t *testing.T) {
	dir := t.TempDir()
	epoch := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC) // fixed date: a layer's file times, never stored
	cfg := Config{Tag: "0.1.0", Revision: "abc", Source: "https://example.com/x", Created: epoch.Add(time.Hour)}
	def := Definition{
		Repository: "x",
		Layers:     []LayerSpec{{CreatedBy: "file", ModTime: epoch, Entries: []Entry{{Path: "x", Type: tar.TypeReg, Mode: 0o755, Data: []byte("x")}}}},
		Entrypoint: []string{"/x"},
		User:       "65532:65532",
	}
	l, err := layerCache{dir: filepath.Join(dir, "cache")}.build(def.Layers[0])
	if err != nil {
		t.Fatal(err)
	}
	img, err := assemble(cfg, def, []*layer{l})
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "x.oci.tar")
	if written, err := writeArchive(archive, img, "registry.example.com/x:0.1.0", "0.1.0", cfg.Created); err != nil || !written {
		t.Fatalf("writeArchive: written %v, %v", written, err)
	}
	before, err := os.Stat(archive)
	if err != nil {
		t.Fatal(err)
	}
	ref, got := readLayout(t, archive)
	if ref != "registry.example.com/x:0.1.0" {
		t.Errorf("index names the image %q", ref)
	}
	if err := validate.Image(got); err != nil {
		t.Errorf("validate: %v", err)
	}
	cf, err := got.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || cf.Config.Labels[LabelRevision] != "abc" || !cf.Created.Time.Equal(cfg.Created) {
		t.Errorf("config: user %q, labels %v, created %v", cf.Config.User, cf.Config.Labels, cf.Created)
	}
	if written, err := writeArchive(archive, img, "registry.example.com/x:0.1.0", "0.1.0", cfg.Created); err != nil || written {
		t.Errorf("the same image again: written %v, %v; want it left alone", written, err)
	}
	after, _ := os.Stat(archive)
	if !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the archive was rewritten")
	}
}

// readLayout unpacks an archive and reads its one image back with
// go-containerregistry's layout reader; it returns the containerd name
// of the index's descriptor.
func readLayout(t testing.TB, archive string) (string, v1.Image) {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(cleanName(h.Name)))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			out, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(out, tr); err != nil {
				t.Fatal(err)
			}
			out.Close()
		default:
			t.Fatalf("%s: member %s of type %q", archive, h.Name, h.Typeflag)
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("%s is not an OCI image layout: %v", archive, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("%s: %d manifests in index.json, want 1", archive, len(m.Manifests))
	}
	d := m.Manifests[0]
	if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != "amd64" {
		t.Errorf("%s: platform %v, want linux/amd64", archive, d.Platform)
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	return d.Annotations[AnnotationImageName], img
}
