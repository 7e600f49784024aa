package images

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations of the index's descriptor. containerd's `ctr images import`
// names the image after AnnotationImageName (and ignores RefName unless
// given --base-name); skopeo and other OCI tools read RefName, which the
// image layout specification makes the tag.
const (
	AnnotationImageName = "io.containerd.image.name"
	AnnotationRefName   = "org.opencontainers.image.ref.name"
)

// writeArchive writes img as an OCI image layout in a tar file at dst:
// oci-layout, index.json (one manifest, named ref, tagged tag), then
// the blobs. Every member has mtime and no owner names, so the file is
// the same for the same image. When dst already holds the same
// index.json, it is left alone: the index names the manifest's digest,
// which names everything else.
func writeArchive(dst string, img v1.Image, ref, tag string, mtime time.Time) (written bool, err error) {
	manifest, err := img.RawManifest()
	if err != nil {
		return false, err
	}
	digest, err := img.Digest()
	if err != nil {
		return false, err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return false, err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return false, err
	}
	index, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType:   types.OCIManifestSchema1,
			Size:        int64(len(manifest)),
			Digest:      digest,
			Platform:    &v1.Platform{OS: "linux", Architecture: "amd64"},
			Annotations: map[string]string{AnnotationImageName: ref, AnnotationRefName: tag},
		}},
	})
	if err != nil {
		return false, err
	}
	if old, err := readIndex(dst); err == nil && bytes.Equal(old, index) {
		return false, nil
	}
	layers, err := img.Layers()
	if err != nil {
		return false, err
	}

	tmp, err := os.CreateTemp(filepath.Dir(dst), filepath.Base(dst)+".*.tmp")
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	tw := tar.NewWriter(tmp)
	hdr := func(name string, typ byte, size int64) *tar.Header {
		mode := int64(0o644)
		if typ == tar.TypeDir {
			mode = 0o755
		}
		return &tar.Header{Typeflag: typ, Name: name, Size: size, Mode: mode, ModTime: mtime.UTC().Truncate(time.Second), Format: tar.FormatPAX}
	}
	small := func(name string, b []byte) error {
		if err := tw.WriteHeader(hdr(name, tar.TypeReg, int64(len(b)))); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	if err := small("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return false, err
	}
	if err := small("index.json", index); err != nil {
		return false, err
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(hdr(d, tar.TypeDir, 0)); err != nil {
			return false, err
		}
	}
	if err := small("blobs/sha256/"+digest.Hex, manifest); err != nil {
		return false, err
	}
	if err := small("blobs/sha256/"+cfgName.Hex, config); err != nil {
		return false, err
	}
	seen := map[v1.Hash]bool{}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return false, err
		}
		if seen[d] {
			continue
		}
		seen[d] = true
		size, err := l.Size()
		if err != nil {
			return false, err
		}
		rc, err := l.Compressed()
		if err != nil {
			return false, err
		}
		err = tw.WriteHeader(hdr("blobs/sha256/"+d.Hex, tar.TypeReg, size))
		if err == nil {
			_, err = io.Copy(tw, rc)
		}
		rc.Close()
		if err != nil {
			return false, fmt.Errorf("write layer %s: %w", d, err)
		}
	}
	if err := tw.Close(); err != nil {
		return false, err
	}
	// CreateTemp's 0600 would keep the archive from a non-root importer.
	if err := tmp.Chmod(0o644); err != nil {
		return false, err
	}
	if err := tmp.Close(); err != nil {
		return false, err
	}
	return true, os.Rename(tmp.Name(), dst)
}

// readIndex returns the index.json of an archive writeArchive wrote
// (where it is the second member).
func readIndex(archive string) ([]byte, error) {
	f, err := os.Open(archive)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for range 2 {
		h, err := tr.Next()
		if err != nil {
			return nil, err
		}
		if h.Name == "index.json" {
			return io.ReadAll(io.LimitReader(tr, 1<<20))
		}
	}
	return nil, errors.New("no index.json among the first members")
}
