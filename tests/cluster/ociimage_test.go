package cluster

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAnImageArchiveIsAnOCILayoutNamedForContainerdAndReproducible(t *testing.T) {
	dir := t.TempDir()
	img := Image{Name: "spikehunt.local/x:1", Entrypoint: []string{"/bin/x"}, User: "65532:65532",
		Files: []ImageFile{{Path: "/bin/x", Mode: 0o755, Data: []byte("#!x")}}}
	a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	if err := WriteImageArchive(a, img); err != nil {
		t.Fatal(err)
	}
	if err := WriteImageArchive(b, img); err != nil {
		t.Fatal(err)
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ab, bb) {
		t.Error("the same image written twice gives different archives")
	}
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(ab))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		files[h.Name] = data
	}
	var index struct {
		Manifests []ociDescriptor `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 1 || index.Manifests[0].Annotations["io.containerd.image.name"] != img.Name ||
		index.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "1" {
		t.Fatalf("index.json = %s", files["index.json"])
	}
	manifest := files[blobPath(index.Manifests[0].Digest)]
	if digestOf(manifest) != index.Manifests[0].Digest {
		t.Fatalf("the manifest blob does not match its digest")
	}
	var m struct {
		Config ociDescriptor   `json:"config"`
		Layers []ociDescriptor `json:"layers"`
	}
	if err := json.Unmarshal(manifest, &m); err != nil {
		t.Fatal(err)
	}
	layer := files[blobPath(m.Layers[0].Digest)]
	lr := tar.NewReader(bytes.NewReader(layer))
	var names []string
	for {
		h, err := lr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name == "bin/x" && h.Mode != 0o755 {
			t.Errorf("bin/x mode %o, want 755", h.Mode)
		}
	}
	if strings.Join(names, " ") != "bin/ bin/x" {
		t.Errorf("layer holds %v, want bin/ and bin/x", names)
	}
	if !strings.Contains(string(files[blobPath(m.Config.Digest)]), `"User":"65532:65532"`) {
		t.Errorf("config = %s", files[blobPath(m.Config.Digest)])
	}
}

func TestAnImageWithoutATagOrWithARelativePathIsRefused(t *testing.T) {
	dir := t.TempDir()
	for _, img := range []Image{
		{Name: "spikehunt.local/x", Files: []ImageFile{{Path: "/x", Data: nil}}},
		{Name: "localhost:5000/x", Files: []ImageFile{{Path: "/x", Data: nil}}},
		{Name: "spikehunt.local/x:1", Files: []ImageFile{{Path: "x", Data: nil}}},
		{Name: "spikehunt.local/x:1", Files: []ImageFile{{Path: "/x"}, {Path: "/x"}}},
	} {
		if err := WriteImageArchive(filepath.Join(dir, "a.tar"), img); err == nil {
			t.Errorf("WriteImageArchive(%+v) = nil, want an error", img)
		}
	}
}
