package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/captures"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/operator/internal/report"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// storeReports is the agents' store as the report server reads it, as
// operator/cmd adapts it (that adapter lives in package main).
type storeReports struct{ st artifact.Store }

func (a storeReports) Record(ctx context.Context, id string) (*record.Metadata, error) {
	md, err := a.st.Get(ctx, id)
	if errors.Is(err, artifact.ErrNotFound) {
		return nil, fmt.Errorf("%w: %w", report.ErrNotFound, err)
	}
	return md, err
}

func (a storeReports) Open(ctx context.Context, id, file string) (io.ReadCloser, error) {
	rc, err := a.st.Open(ctx, id, file)
	if errors.Is(err, artifact.ErrNotFound) {
		return nil, fmt.Errorf("%w: %w", report.ErrNotFound, err)
	}
	return rc, err
}

// checkExplained holds an indexed capture to what every explained capture
// has: a findings row in the captures table, and a report that
// the operator's report server serves from the store, whose page says
// the same verdict.
func checkExplained(t *testing.T, c *v1alpha1.Capture, row *captures.Capture, reader client.Reader, st artifact.Store) {
	t.Helper()
	if row.Findings == nil || row.Findings.Verdict == "" {
		t.Fatalf("the captures row of %s has no findings: %+v", c.Name, row)
	}
	if row.Namespace != c.Namespace || row.Name != c.Name {
		t.Errorf("the captures row names Capture %s/%s, want %s/%s", row.Namespace, row.Name, c.Namespace, c.Name)
	}
	const password = "e2e-oncall"
	sum := sha256.Sum256([]byte(password))
	users := filepath.Join(t.TempDir(), "users.yaml")
	if err := os.WriteFile(users, []byte(fmt.Sprintf("users:\n  - name: oncall\n    password_hash: sha256:%s\n    namespaces: [%s]\n",
		hex.EncodeToString(sum[:]), c.Namespace)), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := report.New(report.Config{Address: "127.0.0.1:0", UsersFile: users}, reader, storeReports{st}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	url := "http://" + srv.Addr().String() + "/captures/" + row.Namespace + "/" + row.Name + "/report"
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("oncall", password)
	hc := &http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET %s: %d %s: %.300s", url, resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	page := html.UnescapeString(string(body))
	if !strings.Contains(page, row.Findings.Verdict) {
		t.Errorf("the report served for %s/%s (%d bytes) does not say the row's verdict %q", row.Namespace, row.Name, len(body), row.Findings.Verdict)
	}
	t.Logf("verdict %q; report %s served (%d bytes)", row.Findings.Verdict, url, len(body))
}
