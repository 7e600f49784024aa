package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/operator/internal/report"
)

// artifactStore deletes capture artifacts on retention through the same
// store the agents upload to. It is the one agent package the operator
// imports, for its Store only: deleting a record must also drop the
// content-addressed objects no other record names, and that rule lives
// with the store.
type artifactStore struct{ st artifact.Store }

// DeleteArtifact implements controller.ArtifactDeleter: an artifact that
// is already gone is not an error, so that the finalizer can retry.
func (a artifactStore) DeleteArtifact(ctx context.Context, armingID string, _ v1alpha1.Artifact) error {
	if err := a.st.Delete(ctx, armingID); err != nil && !errors.Is(err, artifact.ErrNotFound) {
		return fmt.Errorf("delete artifact %s: %w", armingID, err)
	}
	return nil
}

// openArtifactStore reads the agents' store configuration (the YAML of
// the agent's capture.store: local.dir, or s3 with its endpoint, bucket,
// prefix and key files or credentials: ambient) and opens the store.
func openArtifactStore(ctx context.Context, path string) (artifact.Store, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--artifacts.config: %w", err)
	}
	var cfg artifact.StoreConfig
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("--artifacts.config %s: %w", path, err)
	}
	st, err := artifact.OpenStore(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("--artifacts.config %s: %w", path, err)
	}
	return st, nil
}

// artifactReports is the store as the report server reads it
// (operator/internal/report.Artifacts): the store's ErrNotFound becomes
// the report package's, which may not import the store.
type artifactReports struct{ st artifact.Store }

func (a artifactReports) Record(ctx context.Context, id string) (*record.Metadata, error) {
	md, err := a.st.Get(ctx, id)
	if errors.Is(err, artifact.ErrNotFound) {
		return nil, fmt.Errorf("%w: %w", report.ErrNotFound, err)
	}
	return md, err
}

func (a artifactReports) Open(ctx context.Context, id, file string) (io.ReadCloser, error) {
	rc, err := a.st.Open(ctx, id, file)
	if errors.Is(err, artifact.ErrNotFound) {
		return nil, fmt.Errorf("%w: %w", report.ErrNotFound, err)
	}
	return rc, err
}

// presigningReports adds presigned URLs to artifactReports over an S3
// store; the report server's redirect mode takes only this one.
type presigningReports struct {
	artifactReports
	s3 *artifact.S3Store
}

func (p presigningReports) PresignGet(ctx context.Context, id, file string, ttl time.Duration, contentType string) (*url.URL, error) {
	ps, err := p.s3.PresignGet(ctx, id, file, ttl, contentType)
	if err != nil {
		return nil, err
	}
	return ps.URL, nil
}

// reportArtifacts is st as the report server reads it: able to presign
// when st is an S3 store.
func reportArtifacts(st artifact.Store) report.Artifacts {
	if s3, ok := st.(*artifact.S3Store); ok {
		return presigningReports{artifactReports{st}, s3}
	}
	return artifactReports{st}
}
