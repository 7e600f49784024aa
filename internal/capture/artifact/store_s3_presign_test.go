package artifact_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// A presigned URL reads one file of one capture from the real s3proxy,
// without the store's keys, as the Content-Type it was signed with, and no
// other object; its lifetime is bounded and an unknown file is not signed.
func TestStoreS3PresignsOneObjectForABoundedTime(t *testing.T) {
	srv := testenv.S3(t)
	ctx := context.Background()
	st, err := artifact.OpenS3Store(ctx, s3Config(t, srv, "prod/"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	md, dir := sealed(t, "presign-1", [2]string{"report.html", "<!doctype html><p>report</p>"}, [2]string{"perf.data.1", "PERFILE2"})
	if _, err := st.Put(ctx, md, dir); err != nil {
		t.Fatal(err)
	}
	ps, err := st.PresignGet(ctx, md.ID, "report.html", time.Minute, "text/html; charset=utf-8")
	if err != nil {
		t.Fatal(err)
	}
	rf, _ := md.FileNamed("report.html")
	if ps.File != rf || !strings.HasSuffix(ps.URL.Path, "/prod/objects/sha256/"+rf.SHA256) || ps.URL.Query().Get("X-Amz-Expires") != "60" ||
		time.Until(ps.Expires) > time.Minute || time.Until(ps.Expires) < 50*time.Second {
		t.Errorf("presigned %+v, want the report's object for a minute", ps)
	}
	resp, err := http.Get(ps.URL.String())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "<!doctype html><p>report</p>" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Errorf("GET the URL: %s %q as %q", resp.Status, body, resp.Header.Get("Content-Type"))
	}
	for _, ttl := range []time.Duration{0, 8 * 24 * time.Hour} {
		if _, err := st.PresignGet(ctx, md.ID, "report.html", ttl, ""); err == nil {
			t.Errorf("a lifetime of %v was signed", ttl)
		}
	}
	if _, err := st.PresignGet(ctx, md.ID, "stacks.folded", time.Minute, ""); !errors.Is(err, artifact.ErrNotFound) {
		t.Errorf("a file the record does not name: %v, want ErrNotFound", err)
	}
	if _, err := st.PresignGet(ctx, "no-such-capture", "report.html", time.Minute, ""); !errors.Is(err, artifact.ErrNotFound) {
		t.Errorf("an unknown capture: %v, want ErrNotFound", err)
	}
	if _, err := st.PresignGet(ctx, md.ID, "../captures/presign-1.json", time.Minute, ""); err == nil {
		t.Error("a path was signed")
	}
}
