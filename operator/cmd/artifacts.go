package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"

	"go.yaml.in/yaml/v3"

	"github.com/spikehunt/spikehunt/agents/capture/artifact"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
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
