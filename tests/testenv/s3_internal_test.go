package testenv

import (
	"strings"
	"testing"

	"github.com/minio/minio-go/v7/pkg/s3utils"
)

func TestS3BucketNamesAreValidS3BucketNames(t *testing.T) {
	tests := []struct {
		test string
		want string
	}{
		{"TestPut", "t-testput-1"},
		{"TestStore/a_path_with_.._and_slashes", "t-teststore-a-path-with-and-slashes-1"},
		{"Test" + strings.Repeat("Long", 40), ""},
		{"/__/", "t--1"}, // nothing left of the name: still valid
	}
	for _, tt := range tests {
		got := s3BucketName(tt.test, 1)
		if tt.want != "" && got != tt.want {
			t.Errorf("s3BucketName(%q) = %q, want %q", tt.test, got, tt.want)
		}
		if err := s3utils.CheckValidBucketNameStrict(got); err != nil || len(got) > 63 {
			t.Errorf("s3BucketName(%q) = %q (%d bytes): %v", tt.test, got, len(got), err)
		}
	}
}

func TestS3WithoutJarsSaysToRunMakeDeps(t *testing.T) {
	t.Setenv("SPIKEHUNT_S3PROXY_LIBS", t.TempDir())
	p, err := startS3Proxy("127.0.0.1")
	if err == nil {
		p.stop()
		t.Fatal("s3proxy started without jars")
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "make deps") || !strings.Contains(msg, "SPIKEHUNT_S3PROXY_LIBS") {
		t.Errorf("error %q: want one line naming SPIKEHUNT_S3PROXY_LIBS and `make deps`", msg)
	}
}
