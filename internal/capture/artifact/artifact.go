// Package artifact is where a capture's files go once the recorder is done
// with them: Seal pins them by sha256 into their record
// (artifact/record), and a Store (a local folder or an S3 bucket) keeps
// them, content-addressed, beside the record. The agent's engine puts
// artifacts; the operator's retention lists and deletes them.
package artifact

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

// An artifact is a capture's files plus its Metadata. Seal pins the files
// by content before they leave the recorder's dir: each file's size and
// sha256, their sum, and one checksum over all of them. From then on the
// artifact is immutable; a Store keeps it by those checksums.

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
func Seal(dir string, md *record.Metadata) error {
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
	if len(names) > record.MaxArtifactFiles {
		return fmt.Errorf("%w: capture %s has %d files, more than %d", record.ErrInvalid, md.ID, len(names), record.MaxArtifactFiles)
	}

	files := make([]record.File, 0, len(names))
	seen := make(map[string]bool, len(names))
	var total int64
	for _, name := range names {
		if err := record.ValidName("file name", name); err != nil {
			return fmt.Errorf("seal capture %s: %w", md.ID, err)
		}
		if seen[name] {
			return fmt.Errorf("%w: capture %s lists file %q twice", record.ErrInvalid, md.ID, name)
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
		files = append(files, record.File{Name: name, Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))})
		total += n
	}

	sealed := *md
	sealed.Files = files
	sealed.Bytes = total
	sealed.Checksum = record.Checksum(files)
	if sealed.Version == 0 {
		sealed.Version = record.MetadataVersion
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
		if err := record.ValidName("file name", e.Name()); err != nil {
			return nil, err
		}
		if !e.Type().IsRegular() {
			return nil, fmt.Errorf("%w: %s is a %s, not a regular file", record.ErrInvalid, e.Name(), describeMode(e.Type()))
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
		return nil, fmt.Errorf("%w: %s is a %s, not a regular file", record.ErrInvalid, name, describeMode(fi.Mode()))
	}
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	if opened, err := f.Stat(); err != nil || !os.SameFile(fi, opened) {
		f.Close()
		return nil, fmt.Errorf("%w: %s was replaced while it was opened", record.ErrInvalid, name)
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
