package artifact

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"time"
)

// An artifact is a capture's files plus its Metadata. Seal pins the files
// by content before they leave the recorder's dir: each file's size and
// sha256, their sum, and one checksum over all of them. From then on the
// artifact is immutable; a Store keeps it by those checksums.

// Bounds on an artifact, named so errors can quote them.
const (
	// MaxArtifactFiles bounds a capture's file count: a recorder writes a
	// handful (one per dump plus the request records).
	MaxArtifactFiles = 1024
	// MaxMetadataBytes bounds a metadata record as read back from a store,
	// so that a corrupt or hostile record cannot exhaust memory.
	MaxMetadataBytes = 1 << 20
)

// Seal fills in md.Files' sizes and sha256 checksums, md.Bytes and
// md.Checksum from the files in dir, and sets md.Version when it is zero.
// The files are md.Files' names in their order; when md.Files is empty,
// every entry of dir, sorted by name. A name that fails ValidName, a
// symlink, a folder or any other non-regular file is refused (wrapping
// ErrInvalid), and md is left unchanged on every error. The result passes
// CheckSealed.
//
// Seal reads dir through an os.Root, so no name can reach outside it, and
// it must be called once the recorder is done with the files: a file that
// changes afterwards no longer matches its checksum, and Store.Put refuses
// it.
func Seal(dir string, md *Metadata) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("seal capture %s: %w", md.ID, err)
	}
	defer root.Close()

	var names []string
	if len(md.Files) > 0 {
		for _, f := range md.Files {
			names = append(names, f.Name)
		}
	} else if names, err = listArtifactDir(root); err != nil {
		return fmt.Errorf("seal capture %s: %w", md.ID, err)
	}
	if len(names) > MaxArtifactFiles {
		return fmt.Errorf("%w: capture %s has %d files, more than %d", ErrInvalid, md.ID, len(names), MaxArtifactFiles)
	}

	files := make([]File, 0, len(names))
	seen := make(map[string]bool, len(names))
	var total int64
	for _, name := range names {
		if err := ValidName("file name", name); err != nil {
			return fmt.Errorf("seal capture %s: %w", md.ID, err)
		}
		if seen[name] {
			return fmt.Errorf("%w: capture %s lists file %q twice", ErrInvalid, md.ID, name)
		}
		seen[name] = true
		f, err := openArtifactFile(root, name)
		if err != nil {
			return fmt.Errorf("seal capture %s: %w", md.ID, err)
		}
		h := sha256.New()
		n, err := io.Copy(h, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("seal capture %s: read %s: %w", md.ID, name, err)
		}
		files = append(files, File{Name: name, Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))})
		total += n
	}

	sealed := *md
	sealed.Files = files
	sealed.Bytes = total
	sealed.Checksum = artifactChecksum(files)
	if sealed.Version == 0 {
		sealed.Version = MetadataVersion
	}
	if err := sealed.CheckSealed(); err != nil {
		return fmt.Errorf("seal capture %s: %w", md.ID, err)
	}
	*md = sealed
	return nil
}

// listArtifactDir returns the names in root's top folder, sorted, refusing
// anything that is not a regular file with a valid name.
func listArtifactDir(root *os.Root) ([]string, error) {
	d, err := root.Open(".")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if err := ValidName("file name", e.Name()); err != nil {
			return nil, err
		}
		if !e.Type().IsRegular() {
			return nil, fmt.Errorf("%w: %s is a %s, not a regular file", ErrInvalid, e.Name(), describeMode(e.Type()))
		}
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names, nil
}

// openArtifactFile opens name in root for reading, refusing anything but a
// regular file. Lstat refuses a symlink; the identity check after Open
// refuses one swapped in between the two calls (os.Root would have kept it
// inside the root, but it would not be the file that was checked).
func openArtifactFile(root *os.Root, name string) (*os.File, error) {
	fi, err := root.Lstat(name)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is a %s, not a regular file", ErrInvalid, name, describeMode(fi.Mode()))
	}
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	if opened, err := f.Stat(); err != nil || !os.SameFile(fi, opened) {
		f.Close()
		return nil, fmt.Errorf("%w: %s was replaced while it was opened", ErrInvalid, name)
	}
	return f, nil
}

func describeMode(m os.FileMode) string {
	switch {
	case m&os.ModeSymlink != 0:
		return "symlink"
	case m.IsDir():
		return "folder"
	case m&os.ModeNamedPipe != 0:
		return "named pipe"
	case m&os.ModeSocket != 0:
		return "socket"
	case m&os.ModeDevice != 0:
		return "device"
	default:
		return "non-regular file (" + m.Type().String() + ")"
	}
}

// artifactChecksum is the sha256 over each file's hex checksum followed by
// a newline, in order: `printf '%s\n' <sha256>... | sha256sum` gives the
// same value.
func artifactChecksum(files []File) string {
	h := sha256.New()
	for _, f := range files {
		io.WriteString(h, f.SHA256)
		io.WriteString(h, "\n")
	}
	return hex.EncodeToString(h.Sum(nil))
}

// CheckSealed checks that md describes a sealed artifact a store may keep:
// a supported version, a valid id, at most MaxArtifactFiles files with
// valid, distinct names and well-formed checksums, Bytes their sum,
// Checksum their artifact checksum, and Requests one of them. Errors wrap
// ErrInvalid.
func (md *Metadata) CheckSealed() error {
	if md.Version < 1 || md.Version > MetadataVersion {
		return fmt.Errorf("%w: metadata version %d: this build reads 1 to %d", ErrInvalid, md.Version, MetadataVersion)
	}
	if err := ValidName("capture id", md.ID); err != nil {
		return err
	}
	if len(md.Files) > MaxArtifactFiles {
		return fmt.Errorf("%w: capture %s has %d files, more than %d", ErrInvalid, md.ID, len(md.Files), MaxArtifactFiles)
	}
	seen := make(map[string]bool, len(md.Files))
	var total int64
	for _, f := range md.Files {
		if err := ValidName("file name", f.Name); err != nil {
			return err
		}
		if seen[f.Name] {
			return fmt.Errorf("%w: capture %s lists file %q twice", ErrInvalid, md.ID, f.Name)
		}
		seen[f.Name] = true
		if !isSHA256Hex(f.SHA256) {
			return fmt.Errorf("%w: capture %s file %s: sha256 %q is not 64 lower-case hex digits (was the artifact sealed?)", ErrInvalid, md.ID, f.Name, f.SHA256)
		}
		if f.Bytes < 0 || total+f.Bytes < total {
			return fmt.Errorf("%w: capture %s file %s: size %d", ErrInvalid, md.ID, f.Name, f.Bytes)
		}
		total += f.Bytes
	}
	if md.Bytes != total {
		return fmt.Errorf("%w: capture %s: bytes %d is not the sum of its files (%d)", ErrInvalid, md.ID, md.Bytes, total)
	}
	if want := artifactChecksum(md.Files); md.Checksum != want {
		return fmt.Errorf("%w: capture %s: checksum %q does not match its files (%s)", ErrInvalid, md.ID, md.Checksum, want)
	}
	if md.Requests != "" && !seen[md.Requests] {
		return fmt.Errorf("%w: capture %s: request records %q are not one of its files", ErrInvalid, md.ID, md.Requests)
	}
	return nil
}

func isSHA256Hex(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// DecodeMetadata reads a metadata record written by a Store (untrusted: a
// bucket is shared, a volume can be edited). It accepts fields it does not
// know, as records written by newer builds have, and refuses a record over
// MaxMetadataBytes, trailing data, or one that fails CheckSealed. Errors
// wrap ErrInvalid.
func DecodeMetadata(b []byte) (*Metadata, error) {
	if len(b) > MaxMetadataBytes {
		return nil, fmt.Errorf("%w: metadata record of %d bytes, more than %d", ErrInvalid, len(b), MaxMetadataBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var md Metadata
	if err := dec.Decode(&md); err != nil {
		return nil, fmt.Errorf("%w: metadata record: %v", ErrInvalid, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: metadata record: data after the JSON object", ErrInvalid)
	}
	if err := md.CheckSealed(); err != nil {
		return nil, err
	}
	return &md, nil
}

// encodeMetadata is the stored form of md: indented JSON with every time
// in UTC, so that equal records encode to equal bytes whatever zone their
// times were made in. Stores compare these bytes to tell an idempotent Put
// from a conflicting one.
func encodeMetadata(md *Metadata) ([]byte, error) {
	// A JSON round trip gives a deep copy to normalise without touching
	// md, and keeps exactly what the stored record can hold.
	b, err := json.Marshal(md)
	if err != nil {
		return nil, fmt.Errorf("encode metadata of capture %s: %w", md.ID, err)
	}
	var norm Metadata
	if err := json.Unmarshal(b, &norm); err != nil {
		return nil, fmt.Errorf("encode metadata of capture %s: %w", md.ID, err)
	}
	utcTimes(reflect.ValueOf(&norm))
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&norm); err != nil {
		return nil, fmt.Errorf("encode metadata of capture %s: %w", md.ID, err)
	}
	return buf.Bytes(), nil
}

var timeType = reflect.TypeFor[time.Time]()

// utcTimes sets every time.Time reachable from v through exported fields,
// pointers, slices and arrays to UTC. Walking the type rather than naming
// the fields keeps it right when Metadata gains a time.
func utcTimes(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			utcTimes(v.Elem())
		}
	case reflect.Struct:
		if v.Type() == timeType {
			if v.CanSet() {
				v.Set(reflect.ValueOf(v.Interface().(time.Time).UTC()))
			}
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				utcTimes(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			utcTimes(v.Index(i))
		}
	}
}

// fileNamed returns md's file called name.
func (md *Metadata) fileNamed(name string) (File, bool) {
	for _, f := range md.Files {
		if f.Name == name {
			return f, true
		}
	}
	return File{}, false
}
