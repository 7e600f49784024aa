// Package artifacts is `spikehunt captures get`: a capture's files fetched
// from the artifact store the captures index points at, each checked
// against its sha256 on the way, and the record beside them.
package artifacts

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	spikehunt "github.com/spikehunt/spikehunt/pipelines/cli"
)

const getSynopsis = `Arguments: CAPTURE, before or after the flags.

Downloads a capture's files (perf.data, trace files, requests.jsonl, ...) from
the artifact store its captures row names (the uri of spikehunt captures
-o json: a folder on the node, or an S3 bucket), checks each against the
sha256 the agent sealed it with, and writes them with the capture's record
(metadata.json) into --out. CAPTURE is a capture id or a unique prefix of one.

A file whose content does not match is not kept, and the command fails
saying which; the folder is written only if it is new or empty, so nothing
is overwritten.`

// Get is `spikehunt captures get`.
func Get(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := spikehunt.NewFlags("captures get", getSynopsis, stderr)
	out := fs.String("out", "", "folder to write into, new or empty (default: ./CAPTURE)")
	loc := addLocateFlags(fs)
	id, err := parseWithID(fs, args)
	if err != nil {
		return err
	}
	c, src, err := loc.locate(ctx, id)
	if err != nil {
		return err
	}
	dir := *out
	if dir == "" {
		dir = c.ID
	}
	res, err := fetch(ctx, src, c.Checksum, dir, stderr)
	if err != nil {
		return fmt.Errorf("capture %s from %s: %w", c.ID, c.URI, err)
	}
	// The table of spikehunt captures does not show where a trace is:
	// this line does, as read.
	from := c.URI
	if src.cfg.Local != nil && *loc.storeDir != "" {
		from = src.cfg.Local.Dir
	}
	_, err = fmt.Fprintf(stdout, "capture %s: %d files, %s, sha256 verified, from %s, in %s\n", c.ID, res.files, byteSize(res.bytes), from, dir)
	return err
}

// parseWithID parses the flags and the one capture id, which may come
// before the flags or after them.
func parseWithID(fs *flag.FlagSet, args []string) (string, error) {
	var id string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		id, args = args[0], args[1:]
	}
	parse := func(args []string) error { return spikehunt.ParseFlags(fs, args) }
	if err := parse(args); err != nil {
		return "", err
	}
	if id == "" && fs.NArg() > 0 {
		id = fs.Arg(0)
		if err := parse(fs.Args()[1:]); err != nil {
			return "", err
		}
	}
	if id == "" || fs.NArg() > 0 {
		fmt.Fprintln(fs.Output(), "captures get takes one capture id (or a unique prefix of one)")
		return "", spikehunt.ErrUsage
	}
	return id, nil
}

// fetched is what fetch wrote.
type fetched struct {
	files int
	bytes int64
}

// fetch copies the capture's files and record into dir. The record must
// carry the checksum the index holds (the same artifact), and each file is
// written under a temporary name and renamed only once its sha256 matched.
func fetch(ctx context.Context, src source, checksum, dir string, progress io.Writer) (fetched, error) {
	store, md, err := openRecord(ctx, src, checksum)
	if err != nil {
		return fetched{}, err
	}
	defer store.Close()
	if err := emptyDir(dir); err != nil {
		return fetched{}, err
	}
	var res fetched
	for _, f := range md.Files {
		if err := record.ValidName("file", f.Name); err != nil {
			return res, err
		}
		if err := fetchFile(ctx, store, md.ID, f, filepath.Join(dir, f.Name)); err != nil {
			return res, err
		}
		res.files++
		res.bytes += f.Bytes
		fmt.Fprintf(progress, "%s  %s  sha256 %s ok\n", f.Name, byteSize(f.Bytes), f.SHA256[:12])
	}
	b, err := record.Encode(md)
	if err != nil {
		return res, err
	}
	return res, os.WriteFile(filepath.Join(dir, "metadata.json"), b, 0o644)
}

// fetchFile writes one verified file to dst.
func fetchFile(ctx context.Context, store artifact.Store, id string, f record.File, dst string) (err error) {
	rc, err := store.Open(ctx, id, f.Name)
	if err != nil {
		return err
	}
	defer rc.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+f.Name+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = io.Copy(tmp, rc); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// emptyDir makes dir, or accepts it if it exists and is empty: a fetch
// never overwrites.
func emptyDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(ents) > 0 {
		return fmt.Errorf("%s is not empty: give a new folder with --out (nothing is overwritten)", dir)
	}
	return nil
}

// byteSize is n in the units people read ("12.3 MiB").
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
