package artifacts

import (
	"context"

	"flag"
	"fmt"
	"path/filepath"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"

	"github.com/spikehunt/spikehunt/internal/captures"
	spikehunt "github.com/spikehunt/spikehunt/pipelines/cli"
	"github.com/spikehunt/spikehunt/pipelines/cli/query"
)

// locateFlags are how captures get and captures explain find a capture:
// its row in the captures index, then the artifact store its URI names.
type locateFlags struct {
	dsn      *string
	storeDir *string
	s3       S3Flags
}

func addLocateFlags(fs *flag.FlagSet) *locateFlags {
	l := &locateFlags{}
	l.dsn = fs.String("dsn", spikehunt.EnvOr("SPIKEHUNT_DSN", ""), "the store holding the captures index: chdb:///dir, clickhouse://host:9000/db, http(s)://host:8123/db (env SPIKEHUNT_DSN)")
	l.storeDir = fs.String("store-dir", "", "read a file:// store from this folder instead of the path in the URI (a copy of the node's capture folder)")
	fs.StringVar(&l.s3.Endpoint, "s3.endpoint", spikehunt.EnvOr("SPIKEHUNT_S3_ENDPOINT", ""), "S3 server, host[:port], for s3:// captures (env SPIKEHUNT_S3_ENDPOINT)")
	fs.StringVar(&l.s3.Region, "s3.region", "", "the bucket's region (empty: ask the server)")
	fs.StringVar(&l.s3.Credentials, "s3.credentials", "keys", "keys: from --s3.access-key-env and --s3.secret-key-env; ambient: this machine's AWS identity")
	fs.StringVar(&l.s3.AccessEnv, "s3.access-key-env", "AWS_ACCESS_KEY_ID", "environment variable holding the access key")
	fs.StringVar(&l.s3.SecretEnv, "s3.secret-key-env", "AWS_SECRET_ACCESS_KEY", "environment variable holding the secret key")
	fs.BoolVar(&l.s3.Insecure, "s3.insecure", false, "plain HTTP to the S3 server (a server on this machine only)")
	fs.StringVar(&l.s3.CAFile, "s3.ca-file", "", "PEM file of CA certificates to trust for the S3 server")
	return l
}

// locate finds capture id (or a unique prefix of one) in the index and the
// store that holds its artifact.
func (l *locateFlags) locate(ctx context.Context, id string) (captures.Capture, source, error) {
	st, err := query.OpenStore(ctx, *l.dsn)
	if err != nil {
		return captures.Capture{}, source{}, err
	}
	defer st.Close()
	c, err := captures.Resolve(ctx, st, id)
	if err != nil {
		return c, source{}, err
	}
	if c.URI == "" {
		return c, source{}, fmt.Errorf("capture %s has no artifact yet (status %s): it is written when the capture is uploaded", c.ID, c.Status)
	}
	src, err := sourceOf(c.URI, l.s3)
	if err != nil {
		return c, src, err
	}
	if *l.storeDir != "" {
		if src.cfg.Local == nil {
			return c, src, fmt.Errorf("--store-dir reads a file:// store, and capture %s is at %s", c.ID, c.URI)
		}
		abs, err := filepath.Abs(*l.storeDir)
		if err != nil {
			return c, src, err
		}
		src.cfg.Local.Dir = abs
	}
	return c, src, src.cfg.Validate()
}

// openRecord opens the store that holds src and reads the capture's
// record, which must carry the checksum the index holds (empty: any): the
// same artifact the index describes. The caller closes the store.
func openRecord(ctx context.Context, src source, checksum string) (artifact.Store, *record.Metadata, error) {
	store, err := artifact.OpenStore(ctx, src.cfg)
	if err != nil {
		return nil, nil, err
	}
	md, err := store.Get(ctx, src.id)
	if err == nil && checksum != "" && md.Checksum != checksum {
		err = fmt.Errorf("the stored record's checksum %s is not the index's %s: the store holds another artifact under this id", md.Checksum, checksum)
	}
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	return store, md, nil
}
