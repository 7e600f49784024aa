package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/agents/capture/artifact"
	"github.com/spikehunt/spikehunt/agents/capture/artifact/record"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
)

// Retention through --artifacts.config: the operator opens the agents'
// store from their YAML and deletes an expired capture's record and its
// objects; a second delete (a retried finalizer) is not an error.
func TestArtifactStoreDeletesTheRecordAndItsObjects(t *testing.T) {
	dir := t.TempDir()
	storeDir := filepath.Join(dir, "store")
	if err := os.Mkdir(storeDir, 0o750); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "store.yaml")
	if err := os.WriteFile(cfgPath, []byte("local:\n  dir: "+storeDir+"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := openArtifactStore(ctx, cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o750)
	if err := os.WriteFile(filepath.Join(work, "perf.data.1"), []byte("a trace"), 0o640); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	md := &record.Metadata{ID: "pol-node-a-bait-0123", Host: "node-a", Backend: capture.Perf,
		ArmedAt: now, FiredAt: now, WindowStart: now.Add(-time.Second), WindowEnd: now.Add(time.Second),
		Trigger: record.FireCause{Kind: "manual"}, Files: []record.File{{Name: "perf.data.1"}}}
	if err := artifact.Seal(work, md); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, md, work); err != nil {
		t.Fatal(err)
	}
	del := artifactStore{st}
	if err := del.DeleteArtifact(ctx, md.ID, v1alpha1.Artifact{}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, md.ID); !errors.Is(err, artifact.ErrNotFound) {
		t.Errorf("record after delete: %v, want not found", err)
	}
	objs, _ := filepath.Glob(filepath.Join(storeDir, "objects", "sha256", "*"))
	if len(objs) != 0 {
		t.Errorf("objects left: %v", objs)
	}
	if err := del.DeleteArtifact(ctx, md.ID, v1alpha1.Artifact{}); err != nil {
		t.Errorf("a second delete: %v", err)
	}
	if _, err := openArtifactStore(ctx, filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("a missing config opened")
	}
	os.WriteFile(cfgPath, []byte("local:\n  dri: /x\n"), 0o640)
	if _, err := openArtifactStore(ctx, cfgPath); err == nil {
		t.Error("a config with an unknown key opened")
	}
}
