package cluster

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Image is a single-layer Linux/amd64 image: a few files, no base. The test
// node has no registry to pull from, so every image it runs is written with
// WriteImageArchive and imported with Cluster.ImportImage.
type Image struct {
	// Name is the full reference the kubelet will ask containerd for,
	// "spikehunt.local/pause:3.10.1". Give it a tag other than latest: with
	// :latest the kubelet's default pull policy is Always, and the pull fails.
	Name string
	// Files are the layer's regular files; parent folders are created.
	Files []ImageFile
	// Entrypoint is the image config's Entrypoint.
	Entrypoint []string
	// User is the image config's User ("65535:65535"); empty runs as root.
	User string
	// Labels are the image config's labels.
	Labels map[string]string
}

// ImageFile is one file of an Image's layer.
type ImageFile struct {
	Path string      // absolute path inside the image, "/pause"
	Mode os.FileMode // permission bits, 0o755 for a program
	Data []byte
}

const (
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
)

// ociDescriptor is the OCI image-spec descriptor.
type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// WriteImageArchive writes img as an OCI image layout in a tar archive (the
// format of `ctr images import` and `skopeo copy oci-archive:`). The layer
// is stored uncompressed: the archive is imported once, on this machine.
// Every timestamp is the Unix epoch, so equal inputs give equal digests.
func WriteImageArchive(path string, img Image) error {
	if !strings.Contains(img.Name[strings.LastIndex(img.Name, "/")+1:], ":") {
		return fmt.Errorf("cluster: image name %q must be a reference with a tag, like spikehunt.local/pause:3.10.1", img.Name)
	}
	layer, err := imageLayer(img.Files)
	if err != nil {
		return fmt.Errorf("cluster: image %s: %w", img.Name, err)
	}
	layerDigest := digestOf(layer)
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"created":      time.Unix(0, 0).UTC().Format(time.RFC3339),
		"config": map[string]any{
			"Entrypoint": img.Entrypoint,
			"User":       img.User,
			"Labels":     img.Labels,
			"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return fmt.Errorf("cluster: image %s config: %w", img.Name, err)
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeManifest,
		"config":        ociDescriptor{MediaType: mediaTypeConfig, Digest: digestOf(config), Size: int64(len(config))},
		"layers":        []ociDescriptor{{MediaType: mediaTypeLayer, Digest: layerDigest, Size: int64(len(layer))}},
	})
	if err != nil {
		return fmt.Errorf("cluster: image %s manifest: %w", img.Name, err)
	}
	_, tag, _ := strings.Cut(img.Name[strings.LastIndex(img.Name, "/")+1:], ":")
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeIndex,
		"manifests": []ociDescriptor{{
			MediaType: mediaTypeManifest, Digest: digestOf(manifest), Size: int64(len(manifest)),
			// containerd names the imported image after io.containerd.image.name;
			// other OCI tools read the tag from ref.name.
			Annotations: map[string]string{"io.containerd.image.name": img.Name, "org.opencontainers.image.ref.name": tag},
		}},
	})
	if err != nil {
		return fmt.Errorf("cluster: image %s index: %w", img.Name, err)
	}

	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	entries := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(digestOf(config)), config},
		{blobPath(digestOf(manifest)), manifest},
		{blobPath(layerDigest), layer},
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
			return fmt.Errorf("cluster: image %s: %w", img.Name, err)
		}
	}
	for _, e := range entries {
		if err := writeTarFile(tw, e.name, 0o644, e.data); err != nil {
			return fmt.Errorf("cluster: image %s: %w", img.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("cluster: image %s: %w", img.Name, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("cluster: image %s: %w", img.Name, err)
	}
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		return fmt.Errorf("cluster: write image %s: %w", img.Name, err)
	}
	return nil
}

// imageLayer is the tar of files with their parent folders, sorted so that
// equal inputs give an equal layer.
func imageLayer(files []ImageFile) ([]byte, error) {
	dirs := map[string]bool{}
	byPath := map[string]ImageFile{}
	for _, f := range files {
		if !strings.HasPrefix(f.Path, "/") || filepath.Clean(f.Path) != f.Path || f.Path == "/" {
			return nil, fmt.Errorf("file path %q must be absolute and clean, like /pause", f.Path)
		}
		if _, dup := byPath[f.Path]; dup {
			return nil, fmt.Errorf("file %s given twice", f.Path)
		}
		byPath[f.Path] = f
		for d := filepath.Dir(f.Path); d != "/"; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	var names []string
	for d := range dirs {
		names = append(names, d)
	}
	for p := range byPath {
		names = append(names, p)
	}
	sort.Strings(names)
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, n := range names {
		rel := strings.TrimPrefix(n, "/")
		if dirs[n] {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
				return nil, err
			}
			continue
		}
		f := byPath[n]
		if err := writeTarFile(tw, rel, int64(f.Mode.Perm()), f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func writeTarFile(tw *tar.Writer, name string, mode int64, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: time.Unix(0, 0)}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobPath(digest string) string {
	return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:")
}
