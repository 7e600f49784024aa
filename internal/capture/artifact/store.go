package artifact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

// Store keeps capture artifacts, immutable and addressed by content
// (docs/design.md §6), in a local folder (LocalStore) or an S3-compatible
// bucket (S3Store). Both lay an artifact out the same way under their root
// or prefix:
//
//	objects/sha256/<hex>   each file, named by its content's sha256
//	captures/<id>.json     the metadata record, naming its files' objects
//
// An object is written once: a file whose content is already stored, by
// this capture or another, is not written again. A record is never
// overwritten: a second Put of an id with different metadata fails with
// ErrExists, and one with the same metadata does nothing more than make
// sure every object is there. Put writes the objects before the record, so
// a record that can be read names objects that were all written.
//
// Ids and file names come from requests and from the stored records
// themselves, so each goes through ValidName before it becomes part of a
// path or key, and every record read back is checked (DecodeMetadata).
//
// A Store is safe for concurrent use. Close releases it.
type Store interface {
	// Put stores the sealed artifact md (see Seal) whose files are in dir,
	// verifying each file against its checksum as it is copied: a file
	// that changed since Seal fails the Put. Nothing in dir is changed.
	Put(ctx context.Context, md *record.Metadata, dir string) (Location, error)
	// Get returns the record of capture id, or an error wrapping
	// ErrNotFound.
	Get(ctx context.Context, id string) (*record.Metadata, error)
	// List returns every record that can be read, sorted by id. Records
	// that cannot be read are not dropped silently: the error, which
	// wraps ErrCorrupt, names each of them, and the records that could be
	// read are returned with it.
	List(ctx context.Context) ([]record.Metadata, error)
	// Open reads one file of capture id. The reader checks the content
	// against the record as it goes: a read that reaches the end of a
	// file that does not match returns an error wrapping ErrCorrupt
	// instead of io.EOF. The caller closes it.
	Open(ctx context.Context, id, file string) (io.ReadCloser, error)
	// Delete removes the record of capture id, then the objects no other
	// record names (retention; the operator's finalizers). It reads every
	// other record to know which those are. A Put that runs at the same
	// time and reuses one of those objects can be left naming an object
	// that Delete removed; Open then reports it, and repeating that Put
	// writes the object again.
	Delete(ctx context.Context, id string) error
	// Close releases the store; the others must not be called after it.
	Close() error
}

// Location says where an artifact landed, as URLs (file:///… or
// s3://bucket/…).
type Location struct {
	Metadata string   // the record
	Files    []string // one per md.Files, in order
	// NewObjects and NewBytes count what this Put wrote: files whose
	// content was already stored are not written again.
	NewObjects int
	NewBytes   int64
}

var (
	// ErrNotFound marks a capture, or a file of one, that the store does
	// not hold.
	ErrNotFound = errors.New("not found")
	// ErrExists marks a Put of an id the store holds with other metadata:
	// artifacts are immutable. Give the capture a new id.
	ErrExists = errors.New("a different capture with this id is already stored")
)

// Key layout, relative to a store's root or prefix.
const (
	objectsDir  = "objects/sha256"
	capturesDir = "captures"
	recordExt   = ".json"
)

func objectKey(sha string) string { return objectsDir + "/" + sha }
func recordKey(id string) string  { return capturesDir + "/" + id + recordExt }

// recordID returns the id of a name in the captures folder, or an error
// for a name no Put writes there.
func recordID(name string) (string, error) {
	id, ok := strings.CutSuffix(name, recordExt)
	if !ok {
		return "", fmt.Errorf("%w: %s/%s is not a capture record", record.ErrCorrupt, capturesDir, name)
	}
	if err := record.ValidName("capture id", id); err != nil {
		return "", fmt.Errorf("%w: %s/%s: %v", record.ErrCorrupt, capturesDir, name, err)
	}
	return id, nil
}

// decodeRecord checks a record read back from key for capture id.
func decodeRecord(id string, b []byte) (*record.Metadata, error) {
	md, err := record.DecodeMetadata(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", record.ErrCorrupt, recordKey(id), err)
	}
	if md.ID != id {
		return nil, fmt.Errorf("%w: %s holds capture %q", record.ErrCorrupt, recordKey(id), md.ID)
	}
	return md, nil
}

// readRecord reads at most MaxMetadataBytes+1 from r, enough for
// DecodeMetadata to refuse an oversized record without reading it all.
func readRecord(r io.Reader) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r, record.MaxMetadataBytes+1))
}

// distinctObjects returns md's files with one entry per object, in order:
// two files of one capture can have the same content.
func distinctObjects(md *record.Metadata) []record.File {
	seen := make(map[string]bool, len(md.Files))
	var out []record.File
	for _, f := range md.Files {
		if !seen[f.SHA256] {
			seen[f.SHA256] = true
			out = append(out, f)
		}
	}
	return out
}

// unreferenced returns the objects of md that none of others names.
func unreferenced(md *record.Metadata, others []record.Metadata) []string {
	kept := make(map[string]bool)
	for _, o := range others {
		if o.ID == md.ID {
			continue
		}
		for _, f := range o.Files {
			kept[f.SHA256] = true
		}
	}
	var out []string
	for _, f := range distinctObjects(md) {
		if !kept[f.SHA256] {
			out = append(out, f.SHA256)
		}
	}
	return out
}

// changedSinceSeal is the error for a file whose content no longer matches
// its sealed checksum.
func changedSinceSeal(id string, f record.File, n int64, sum string) error {
	return fmt.Errorf("%w: capture %s file %s changed after it was sealed: sealed %d bytes with sha256 %s, read %d bytes with sha256 %s",
		record.ErrInvalid, id, f.Name, f.Bytes, f.SHA256, n, sum)
}

// verifiedReader passes an object's bytes through and, at the end, checks
// them against the record: the wrong size or content turns io.EOF into an
// error wrapping ErrCorrupt.
type verifiedReader struct {
	rc   io.ReadCloser
	id   string
	file record.File
	h    hash.Hash
	n    int64
	err  error // sticky, once the end was checked
}

func newVerifiedReader(rc io.ReadCloser, id string, f record.File) *verifiedReader {
	return &verifiedReader{rc: rc, id: id, file: f, h: sha256.New()}
}

func (v *verifiedReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.rc.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.n > v.file.Bytes {
		v.err = fmt.Errorf("%w: capture %s file %s: object %s holds more than its %d bytes", record.ErrCorrupt, v.id, v.file.Name, objectKey(v.file.SHA256), v.file.Bytes)
		return n, v.err
	}
	if errors.Is(err, io.EOF) {
		if sum := hex.EncodeToString(v.h.Sum(nil)); v.n != v.file.Bytes || sum != v.file.SHA256 {
			v.err = fmt.Errorf("%w: capture %s file %s: object %s holds %d bytes with sha256 %s, want %d bytes with sha256 %s",
				record.ErrCorrupt, v.id, v.file.Name, objectKey(v.file.SHA256), v.n, sum, v.file.Bytes, v.file.SHA256)
			return n, v.err
		}
		v.err = io.EOF
	}
	return n, err
}

func (v *verifiedReader) Close() error { return v.rc.Close() }
