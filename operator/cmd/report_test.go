package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// The operator started with --report.* and --artifacts.config serves a
// capture's report through its manager (the Capture from the manager's
// cache, the artifact from the store the flag opens), on a standby as
// well: the report server needs no lease (another replica holds it here).
func TestTheOperatorServesACapturesReportFromItsStore(t *testing.T) {
	cfg, _ := testenv.SharedAPIServer(t)
	testenv.InstallCRDs(t, cfg, filepath.Join("..", "config", "crd", "bases"))
	dir := t.TempDir()
	storeDir := filepath.Join(dir, "store")
	os.Mkdir(storeDir, 0o750)
	storeCfg := filepath.Join(dir, "artifacts.yaml")
	os.WriteFile(storeCfg, []byte("local:\n  dir: "+storeDir+"\n"), 0o640)
	sum := sha256.Sum256([]byte("s3cret-token-0123"))
	users := filepath.Join(dir, "users.yaml")
	os.WriteFile(users, []byte(fmt.Sprintf("users:\n  - name: oncall\n    password_hash: sha256:%s\n    namespaces: [\"*\"]\n", hex.EncodeToString(sum[:]))), 0o600)
	addr := freeAddr(t)
	ns := fmt.Sprintf("report-%d", time.Now().UnixNano()%1e6)
	o, err := parseFlags([]string{"--leader-elect", "--leader-election-namespace=" + ns, "--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--artifacts.config=" + storeCfg, "--report.address=" + addr, "--report.users-file=" + users})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := openArtifactStore(ctx, storeCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	o.artifacts, o.reportArtifacts = artifactStore{st}, reportArtifacts(st)
	o.skipNameValidation = true

	// The artifact the node uploads, with its report.
	work := t.TempDir()
	report := "<!doctype html><title>capture</title><p>blocked 998 ms in do_nanosleep</p>\n"
	os.WriteFile(filepath.Join(work, "report.html"), []byte(report), 0o640)
	now := time.Now().UTC()
	md := &record.Metadata{ID: "checkout-node-a-bait-77", Host: "node-a", Backend: "perf", ArmedAt: now, FiredAt: now,
		WindowStart: now.Add(-time.Second), WindowEnd: now.Add(time.Second), Trigger: record.FireCause{Kind: "manual"},
		Files: []record.File{{Name: "report.html"}}}
	if err := artifact.Seal(work, md); err != nil {
		t.Fatal(err)
	}
	loc, err := st.Put(ctx, md, work)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newScheme()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	holder, seconds, renewed := "another-replica", int32(3600), metav1.NewMicroTime(now)
	if err := admin.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: leaderElectionID},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, AcquireTime: &renewed, RenewTime: &renewed}}); err != nil {
		t.Fatal(err)
	}
	c := &v1alpha1.Capture{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cap"},
		Spec: v1alpha1.CaptureSpec{NodeName: "node-a", PolicyRef: v1alpha1.PolicyReference{Name: "gone"}, ArmingID: md.ID, Reason: v1alpha1.ReasonBait,
			Profile: v1alpha1.CaptureProfile{Backend: v1alpha1.BackendPerf}}}
	if err := admin.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	c.Status.Phase = v1alpha1.PhaseUploaded
	c.Status.Artifact = &v1alpha1.Artifact{URI: loc.Metadata, Bytes: md.Bytes, Checksum: md.Checksum}
	if err := admin.Status().Update(ctx, c); err != nil {
		t.Fatal(err)
	}

	mgr, err := newManager(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	url := "http://" + addr + "/captures/" + ns + "/cap/report"
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.SetBasicAuth("oncall", "s3cret-token-0123")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && string(body) == report && resp.Header.Get("Content-Type") == "text/html; charset=utf-8" {
				select {
				case <-mgr.Elected():
					t.Error("this replica took the lease another holds: the test did not run on a standby")
				default:
				}
				return
			}
			err = fmt.Errorf("%s: %q", resp.Status, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
