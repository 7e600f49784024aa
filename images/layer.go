package images

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Entry is one file, folder or symlink a layer adds.
type Entry struct {
	// Path is the slash-separated path in the image, without a leading "/".
	Path string
	// Type is tar.TypeReg, tar.TypeDir or tar.TypeSymlink.
	Type byte
	// Mode holds the permission bits (setuid, setgid and sticky included).
	Mode     int64
	UID, GID int
	// Link is a symlink's target.
	Link string
	// Source is the host file whose bytes a regular file gets; without
	// it, Data.
	Source string
	Data   []byte
}

// LayerSpec is how a layer is made: the files of a root filesystem
// tarball (FromTar, filtered by Keep), then Entries. Every file gets
// ModTime and no user or group names, so the same inputs give the same
// bytes, and so the same digest.
type LayerSpec struct {
	// CreatedBy is the layer's line in the image's history.
	CreatedBy string
	ModTime   time.Time
	FromTar   string
	// Keep selects FromTar's entries by their path (no leading "./", no
	// trailing "/"); nil keeps all. Device nodes are never kept: the
	// container runtime makes /dev.
	Keep func(name string) bool
	// KeepID names Keep's rule in the cache key: change it when Keep changes.
	KeepID  string
	Entries []Entry
}

// layer is a built, gzip-compressed layer on disk; it is a v1.Layer.
type layer struct {
	digest, diffID v1.Hash
	size           int64
	// usize is the size of the uncompressed tar stream.
	usize int64
	path  string
}

var _ v1.Layer = (*layer)(nil)

func (l *layer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *layer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *layer) Size() (int64, error)                { return l.size, nil }
func (l *layer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }
func (l *layer) Compressed() (io.ReadCloser, error)  { return os.Open(l.path) }

func (l *layer) Uncompressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", l.path, err)
	}
	return &readCloser{Reader: zr, close: func() error { zr.Close(); return f.Close() }}, nil
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r *readCloser) Close() error { return r.close() }

// layerRecord is what the cache keeps beside a compressed layer.
type layerRecord struct {
	Digest string `json:"digest"`
	DiffID string `json:"diffID"`
	Size   int64  `json:"size"`
	// UncompressedSize is the tar stream's size.
	UncompressedSize int64 `json:"uncompressedSize"`
}

// layerCache builds layers into dir, once per distinct spec: the key is
// the spec with each input file's path, size and mtime, so an unchanged
// input is neither read nor compressed again.
type layerCache struct{ dir string }

func (c layerCache) build(spec LayerSpec) (*layer, error) {
	key, err := spec.key()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return nil, err
	}
	recPath := filepath.Join(c.dir, key+".json")
	if l, ok := c.lookup(recPath); ok {
		return l, nil
	}
	tmp, err := os.CreateTemp(c.dir, "layer-*.tmp")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	digest := sha256.New()
	counted := &countingWriter{w: io.MultiWriter(tmp, digest)}
	zw, err := gzip.NewWriterLevel(counted, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	diffID := sha256.New()
	raw := &countingWriter{w: io.MultiWriter(zw, diffID)}
	if err := spec.write(raw); err != nil {
		return nil, fmt.Errorf("layer %q: %w", spec.CreatedBy, err)
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	rec := layerRecord{Digest: "sha256:" + hex.EncodeToString(digest.Sum(nil)), DiffID: "sha256:" + hex.EncodeToString(diffID.Sum(nil)), Size: counted.n, UncompressedSize: raw.n}
	blob := filepath.Join(c.dir, strings.Replace(rec.Digest, ":", "-", 1)+".tar.gz")
	if err := os.Rename(tmp.Name(), blob); err != nil {
		return nil, err
	}
	b, _ := json.Marshal(rec)
	if err := os.WriteFile(recPath, b, 0o644); err != nil {
		return nil, err
	}
	l, ok := c.lookup(recPath)
	if !ok {
		return nil, fmt.Errorf("layer %q: the cache lost %s", spec.CreatedBy, blob)
	}
	return l, nil
}

func (c layerCache) lookup(recPath string) (*layer, bool) {
	b, err := os.ReadFile(recPath)
	if err != nil {
		return nil, false
	}
	var rec layerRecord
	if json.Unmarshal(b, &rec) != nil {
		return nil, false
	}
	digest, err1 := v1.NewHash(rec.Digest)
	diffID, err2 := v1.NewHash(rec.DiffID)
	if err1 != nil || err2 != nil {
		return nil, false
	}
	blob := filepath.Join(c.dir, strings.Replace(rec.Digest, ":", "-", 1)+".tar.gz")
	if fi, err := os.Stat(blob); err != nil || fi.Size() != rec.Size {
		return nil, false
	}
	return &layer{digest: digest, diffID: diffID, size: rec.Size, usize: rec.UncompressedSize, path: blob}, true
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// layerFormat is part of every cache key: bump it when write changes what
// it writes for the same spec.
const layerFormat = "spikehunt-layer/1"

// key hashes what the layer's bytes depend on.
func (s LayerSpec) key() (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%s\x00", layerFormat, s.ModTime.Unix(), s.KeepID)
	if s.FromTar != "" {
		if err := hashFileStat(h, s.FromTar); err != nil {
			return "", err
		}
	}
	for _, e := range s.Entries {
		fmt.Fprintf(h, "%s\x00%c\x00%o\x00%d\x00%d\x00%s\x00%x\x00", e.Path, e.Type, e.Mode, e.UID, e.GID, e.Link, sha256.Sum256(e.Data))
		if e.Source != "" {
			if err := hashFileStat(h, e.Source); err != nil {
				return "", err
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func hashFileStat(h hash.Hash, p string) error {
	abs, err := filepath.Abs(p)
	if err != nil {
		return err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", abs)
	}
	fmt.Fprintf(h, "%s\x00%d\x00%d\x00", abs, fi.Size(), fi.ModTime().UnixNano())
	return nil
}

// write writes the layer's uncompressed tar stream.
func (s LayerSpec) write(w io.Writer) error {
	tw := tar.NewWriter(w)
	written := map[string]bool{}
	own := map[string]bool{}
	for _, e := range s.Entries {
		own[cleanName(e.Path)] = true
	}
	// parents writes the folders above name that the stream has not had:
	// a runtime creates missing ones with modes of its own choosing.
	parents := func(name string) error {
		var missing []string
		for d := path.Dir(name); d != "." && d != "/" && !written[d]; d = path.Dir(d) {
			missing = append(missing, d)
		}
		slices.Reverse(missing)
		for _, d := range missing {
			if err := tw.WriteHeader(s.header(tar.TypeDir, d, 0o755, 0, 0, "", 0)); err != nil {
				return err
			}
			written[d] = true
		}
		return nil
	}
	if s.FromTar != "" {
		if err := s.copyTar(tw, written, own, parents); err != nil {
			return err
		}
	}
	entries := slices.Clone(s.Entries)
	slices.SortStableFunc(entries, func(a, b Entry) int { return strings.Compare(cleanName(a.Path), cleanName(b.Path)) })
	for _, e := range entries {
		name := cleanName(e.Path)
		if name == "" || strings.HasPrefix(name, "../") {
			return fmt.Errorf("entry %q: not a path inside the image", e.Path)
		}
		if err := parents(name); err != nil {
			return err
		}
		switch e.Type {
		case tar.TypeDir, tar.TypeSymlink:
			if err := tw.WriteHeader(s.header(e.Type, name, e.Mode, e.UID, e.GID, e.Link, 0)); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := s.writeFile(tw, e, name); err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q: type %q is not a file, folder or symlink", e.Path, e.Type)
		}
		written[name] = true
	}
	return tw.Close()
}

func (s LayerSpec) writeFile(tw *tar.Writer, e Entry, name string) error {
	if e.Source == "" {
		if err := tw.WriteHeader(s.header(tar.TypeReg, name, e.Mode, e.UID, e.GID, "", int64(len(e.Data)))); err != nil {
			return err
		}
		_, err := tw.Write(e.Data)
		return err
	}
	f, err := os.Open(e.Source)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(s.header(tar.TypeReg, name, e.Mode, e.UID, e.GID, "", fi.Size())); err != nil {
		return err
	}
	if n, err := io.Copy(tw, f); err != nil {
		return fmt.Errorf("copy %s: %w", e.Source, err)
	} else if n != fi.Size() {
		return fmt.Errorf("copy %s: %d bytes of %d (changed while read)", e.Source, n, fi.Size())
	}
	return nil
}

// copyTar copies FromTar's kept entries with normalized headers.
func (s LayerSpec) copyTar(tw *tar.Writer, written, own map[string]bool, parents func(string) error) error {
	f, err := os.Open(s.FromTar)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", s.FromTar, err)
		}
		name := cleanName(h.Name)
		if name == "" || own[name] || (s.Keep != nil && !s.Keep(name)) {
			continue
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
		default:
			continue // device nodes, fifos
		}
		link := h.Linkname
		if h.Typeflag == tar.TypeLink {
			link = cleanName(link)
			if !written[link] {
				return fmt.Errorf("read %s: hard link %s to %s, which is not kept", s.FromTar, name, link)
			}
		}
		if err := parents(name); err != nil {
			return err
		}
		size := int64(0)
		if h.Typeflag == tar.TypeReg {
			size = h.Size
		}
		out := s.header(h.Typeflag, name, h.Mode, h.Uid, h.Gid, link, size)
		for k, v := range h.PAXRecords {
			// File capabilities and other extended attributes are part of
			// what a package installs.
			if strings.HasPrefix(k, "SCHILY.xattr.") {
				if out.PAXRecords == nil {
					out.PAXRecords = map[string]string{}
				}
				out.PAXRecords[k] = v
			}
		}
		if err := tw.WriteHeader(out); err != nil {
			return err
		}
		if size > 0 {
			if _, err := io.Copy(tw, tr); err != nil {
				return fmt.Errorf("copy %s from %s: %w", name, s.FromTar, err)
			}
		}
		written[name] = true
	}
}

// header is a tar header with nothing that varies between builds: no
// user or group names, no access or change times, one mtime.
func (s LayerSpec) header(typ byte, name string, mode int64, uid, gid int, link string, size int64) *tar.Header {
	if typ == tar.TypeDir {
		name += "/"
	}
	return &tar.Header{
		Typeflag: typ,
		Name:     name,
		Linkname: link,
		Size:     size,
		Mode:     mode & 0o7777,
		Uid:      uid,
		Gid:      gid,
		ModTime:  s.ModTime.UTC().Truncate(time.Second),
		Format:   tar.FormatPAX,
	}
}

// cleanName is a tar member's path without "./", a leading "/" or a
// trailing "/"; "" for the root.
func cleanName(name string) string {
	name = path.Clean("/" + name)
	return strings.TrimPrefix(name, "/")
}
