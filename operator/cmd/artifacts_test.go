package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/tests/testenv"
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
	md := &record.Metadata{ID: "pol-node-a-bait-0123", Host: "node-a", Backend: "perf",
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

// The chart's s3.credentials: ambient gives the operator a store config
// with no keys: it opens the bucket with the pod's AWS identity (EKS Pod
// Identity here, through testenv.ContainerCredentials, on the real
// s3proxy) and deletes an expired capture's record and objects.
func TestArtifactStoreDeletesWithTheAmbientAWSIdentity(t *testing.T) {
	srv := testenv.S3(t)
	testenv.NoAWSIdentity(t)
	testenv.StartContainerCredentials(t, srv.AccessKey, srv.SecretKey, time.Hour).Use(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "artifacts.yaml")
	cfg := fmt.Sprintf("s3:\n  endpoint: %s\n  region: %s\n  bucket: %s\n  insecure: true\n  credentials: ambient\n", srv.Endpoint, srv.Region, srv.Bucket)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o640); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := openArtifactStore(ctx, cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "perf.data.1"), []byte("a trace"), 0o640); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	md := &record.Metadata{ID: "pol-node-a-bait-0124", Host: "node-a", Backend: "perf",
		ArmedAt: now, FiredAt: now, WindowStart: now.Add(-time.Second), WindowEnd: now.Add(time.Second),
		Trigger: record.FireCause{Kind: "manual"}, Files: []record.File{{Name: "perf.data.1"}}}
	if err := artifact.Seal(work, md); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, md, work); err != nil {
		t.Fatal(err)
	}
	if err := (artifactStore{st}).DeleteArtifact(ctx, md.ID, v1alpha1.Artifact{}); err != nil {
		t.Fatal(err)
	}
	cl, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for obj := range cl.ListObjects(ctx, srv.Bucket, minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		left = append(left, obj.Key)
	}
	if len(left) != 0 {
		t.Errorf("objects left in the bucket: %v", left)
	}

	// Without an identity the operator does not start, and says why.
	testenv.NoAWSIdentity(t)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	_, err = openArtifactStore(ctx, cfgPath)
	if !errors.Is(err, artifact.ErrNoAmbientCredentials) || !strings.Contains(err.Error(), "operator.serviceAccount.annotations") {
		t.Errorf("openArtifactStore without an identity = %v, want ErrNoAmbientCredentials naming operator.serviceAccount.annotations", err)
	}
}
