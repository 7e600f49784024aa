package artifact

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

// LocalStore keeps artifacts in a folder, the configured capture volume.
// Every path goes through an os.Root opened on that folder, so that no id,
// file name or symlink can reach outside it.
//
// Files are written to tmp/ first, synced, then hard-linked to their final
// name: a link fails if the name exists, which makes "never overwrite"
// atomic even between two processes on the volume, and a reader never sees
// a partly written file. The volume must support hard links (every Linux
// filesystem a node mounts for this does; FAT does not).
type LocalStore struct {
	root *os.Root
	dir  string // absolute, for Location URLs
}

// Modes of what LocalStore creates: the agent and a group of readers (a
// sidecar that ships artifacts) may read them, nobody else.
const (
	localFileMode os.FileMode = 0o640
	localDirMode  os.FileMode = 0o750
	// localTmpMaxAge is how old a file in tmp/ must be before OpenLocalStore
	// takes it for the leftover of a crashed Put and removes it.
	localTmpMaxAge = time.Hour
	localTmpDir    = "tmp"
)

// OpenLocalStore opens the store in dir, which must exist: a missing folder
// is more likely an unmounted volume than one to create. It creates the
// store's folders in it and removes temporary files older than an hour.
func OpenLocalStore(dir string) (*LocalStore, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("%w: capture store folder %q is not an absolute path", record.ErrInvalid, dir)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("capture store: %w (mount the capture volume or create the folder)", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%w: capture store %s is not a folder", record.ErrInvalid, dir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("capture store: %w", err)
	}
	for _, d := range []string{objectsDir, capturesDir, localTmpDir} {
		if err := root.MkdirAll(d, localDirMode); err != nil {
			root.Close()
			return nil, fmt.Errorf("capture store %s: %w", dir, err)
		}
	}
	s := &LocalStore{root: root, dir: filepath.Clean(dir)}
	s.removeStaleTemp()
	return s, nil
}

// removeStaleTemp removes what crashed Puts left in tmp/. A file younger
// than localTmpMaxAge may belong to a Put running now in another process.
func (s *LocalStore) removeStaleTemp() {
	d, err := s.root.Open(localTmpDir)
	if err != nil {
		return
	}
	defer d.Close()
	entries, _ := d.ReadDir(-1)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > localTmpMaxAge {
			s.root.Remove(localTmpDir + "/" + e.Name())
		}
	}
}

// Close implements Store.
func (s *LocalStore) Close() error { return s.root.Close() }

func (s *LocalStore) url(key string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(filepath.Join(s.dir, filepath.FromSlash(key)))}).String()
}

// Put implements Store.
func (s *LocalStore) Put(ctx context.Context, md *record.Metadata, dir string) (Location, error) {
	if err := md.CheckSealed(); err != nil {
		return Location{}, err
	}
	record, err := record.Encode(md)
	if err != nil {
		return Location{}, err
	}
	if existing, err := s.readRecord(md.ID); err == nil {
		if !bytes.Equal(existing, record) {
			return Location{}, fmt.Errorf("capture %s: %w (%s)", md.ID, ErrExists, s.url(recordKey(md.ID)))
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Location{}, fmt.Errorf("capture %s: %w", md.ID, err)
	}
	src, err := os.OpenRoot(dir)
	if err != nil {
		return Location{}, fmt.Errorf("capture %s: %w", md.ID, err)
	}
	defer src.Close()

	loc := Location{Metadata: s.url(recordKey(md.ID))}
	for _, f := range md.Files {
		loc.Files = append(loc.Files, s.url(objectKey(f.SHA256)))
	}
	for _, f := range distinctObjects(md) {
		if err := ctx.Err(); err != nil {
			return Location{}, err
		}
		wrote, err := s.putObject(src, md.ID, f)
		if err != nil {
			return Location{}, err
		}
		if wrote {
			loc.NewObjects++
			loc.NewBytes += f.Bytes
		}
	}
	if loc.NewObjects > 0 {
		if err := s.syncDir(objectsDir); err != nil {
			return Location{}, fmt.Errorf("capture %s: %w", md.ID, err)
		}
	}
	if err := s.putRecord(md.ID, record); err != nil {
		return Location{}, err
	}
	return loc, nil
}

// putObject stores file f of capture id from src unless its object exists,
// and reports whether it wrote it. An existing object is trusted by its
// name and size: hashing it again would read every reused file on every
// Put, and Open checks the content whenever it is read.
func (s *LocalStore) putObject(src *os.Root, id string, f record.File) (bool, error) {
	key := objectKey(f.SHA256)
	if fi, err := s.root.Lstat(key); err == nil {
		if !fi.Mode().IsRegular() || fi.Size() != f.Bytes {
			return false, fmt.Errorf("%w: %s is a %d-byte %s, want %d bytes; remove it and Put again", record.ErrCorrupt, s.url(key), fi.Size(), describeMode(fi.Mode()), f.Bytes)
		}
		return false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("capture %s: %w", id, err)
	}

	in, err := openArtifactFile(src, f.Name)
	if err != nil {
		return false, fmt.Errorf("capture %s: %w", id, err)
	}
	defer in.Close()
	tmp, tmpName, err := s.createTemp()
	if err != nil {
		return false, fmt.Errorf("capture %s: %w", id, err)
	}
	defer s.root.Remove(tmpName) // after the link, or instead of it
	h := sha256.New()
	// One byte more than sealed, to see a file that grew.
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(in, f.Bytes+1))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("capture %s: copy %s: %w", id, f.Name, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); n != f.Bytes || sum != f.SHA256 {
		return false, changedSinceSeal(id, f, n, sum)
	}
	err = s.root.Link(tmpName, key)
	if errors.Is(err, fs.ErrExist) {
		return false, nil // another Put stored the same content meanwhile
	}
	if err != nil {
		return false, fmt.Errorf("capture %s: %w (the capture volume must support hard links)", id, err)
	}
	return true, nil
}

// putRecord writes the record of capture id unless an identical one is
// there; a different one is ErrExists.
func (s *LocalStore) putRecord(id string, record []byte) error {
	key := recordKey(id)
	tmp, tmpName, err := s.createTemp()
	if err != nil {
		return fmt.Errorf("capture %s: %w", id, err)
	}
	defer s.root.Remove(tmpName)
	_, err = tmp.Write(record)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("capture %s: write record: %w", id, err)
	}
	err = s.root.Link(tmpName, key)
	if errors.Is(err, fs.ErrExist) {
		existing, rerr := s.readRecord(id)
		if rerr != nil {
			return fmt.Errorf("capture %s: %w", id, rerr)
		}
		if !bytes.Equal(existing, record) {
			return fmt.Errorf("capture %s: %w (%s)", id, ErrExists, s.url(key))
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("capture %s: %w (the capture volume must support hard links)", id, err)
	}
	if err := s.syncDir(capturesDir); err != nil {
		return fmt.Errorf("capture %s: %w", id, err)
	}
	return nil
}

func (s *LocalStore) createTemp() (*os.File, string, error) {
	name := localTmpDir + "/" + rand.Text()
	f, err := s.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, localFileMode)
	return f, name, err
}

// syncDir makes the names linked into dir durable: a record must not
// survive a power cut that loses the objects it names.
func (s *LocalStore) syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil // a folder cannot be fsynced there; NTFS journals the link
	}
	d, err := s.root.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// Get implements Store.
func (s *LocalStore) Get(ctx context.Context, id string) (*record.Metadata, error) {
	if err := record.ValidName("capture id", id); err != nil {
		return nil, err
	}
	b, err := s.readRecord(id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("capture %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("capture %s: %w", id, err)
	}
	return decodeRecord(id, b)
}

// readRecord returns the stored bytes of capture id's record, at most
// MaxMetadataBytes+1 of them.
func (s *LocalStore) readRecord(id string) ([]byte, error) {
	f, err := s.root.Open(recordKey(id))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readRecord(f)
}

// List implements Store.
func (s *LocalStore) List(ctx context.Context) ([]record.Metadata, error) {
	d, err := s.root.Open(capturesDir)
	if err != nil {
		return nil, fmt.Errorf("list captures: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("list captures: %w", err)
	}
	slices.Sort(names)
	var out []record.Metadata
	var bad []error
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		id, err := recordID(name)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		md, err := s.Get(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue // deleted since the listing
		}
		if err != nil {
			bad = append(bad, err)
			continue
		}
		out = append(out, *md)
	}
	return out, listError(bad)
}

// listError joins the reasons records could not be read; each wraps
// ErrCorrupt or an I/O error.
func listError(bad []error) error {
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("list captures: %d records could not be read: %w", len(bad), errors.Join(bad...))
}

// Open implements Store.
func (s *LocalStore) Open(ctx context.Context, id, file string) (io.ReadCloser, error) {
	if err := record.ValidName("file name", file); err != nil {
		return nil, err
	}
	md, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	f, ok := md.FileNamed(file)
	if !ok {
		return nil, fmt.Errorf("capture %s file %s: %w", id, file, ErrNotFound)
	}
	obj, err := s.root.Open(objectKey(f.SHA256))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: capture %s file %s: object %s is missing", record.ErrCorrupt, id, file, s.url(objectKey(f.SHA256)))
	}
	if err != nil {
		return nil, fmt.Errorf("capture %s file %s: %w", id, file, err)
	}
	return newVerifiedReader(obj, id, f), nil
}

// Delete implements Store.
func (s *LocalStore) Delete(ctx context.Context, id string) error {
	md, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	if err := s.root.Remove(recordKey(id)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("capture %s: %w", id, ErrNotFound)
		}
		return fmt.Errorf("delete capture %s: %w", id, err)
	}
	if err := s.syncDir(capturesDir); err != nil {
		return fmt.Errorf("delete capture %s: %w", id, err)
	}
	others, err := s.List(ctx)
	if err != nil {
		return fmt.Errorf("capture %s deleted, its objects kept: cannot tell which other captures use them: %w", id, err)
	}
	for _, sha := range unreferenced(md, others) {
		if err := s.root.Remove(objectKey(sha)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("capture %s deleted: remove object %s: %w", id, sha, err)
		}
	}
	return nil
}

var _ Store = (*LocalStore)(nil)
