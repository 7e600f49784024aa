package record

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"time"
)

// Bounds on an artifact, named so errors can quote them.
const (
	// MaxArtifactFiles bounds a capture's file count: a recorder writes a
	// handful (one per dump plus the request records).
	MaxArtifactFiles = 1024
	// MaxMetadataBytes bounds a metadata record as read back from a store,
	// so that a corrupt or hostile record cannot exhaust memory.
	MaxMetadataBytes = 1 << 20
)

// Checksum is the artifact checksum: the sha256 over each file's hex checksum followed by
// a newline, in order: `printf '%s\n' <sha256>... | sha256sum` gives the
// same value.
func Checksum(files []File) string {
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
	if want := Checksum(md.Files); md.Checksum != want {
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

// Encode is the stored form of md: indented JSON with every time
// in UTC, so that equal records encode to equal bytes whatever zone their
// times were made in. Stores compare these bytes to tell an idempotent Put
// from a conflicting one.
func Encode(md *Metadata) ([]byte, error) {
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

// FileNamed returns md's file called name.
func (md *Metadata) FileNamed(name string) (File, bool) {
	for _, f := range md.Files {
		if f.Name == name {
			return f, true
		}
	}
	return File{}, false
}
