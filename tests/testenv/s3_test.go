package testenv_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestS3GivesEachCallAFreshBucketOnOneSignedServer(t *testing.T) {
	a, b := testenv.S3(t), testenv.S3(t)
	if a.Bucket == b.Bucket {
		t.Fatalf("two S3 calls share bucket %q", a.Bucket)
	}
	if a.Endpoint != b.Endpoint || !strings.HasPrefix(a.Endpoint, "127.0.0.1:") {
		t.Fatalf("endpoints %q and %q: want one server on 127.0.0.1", a.Endpoint, b.Endpoint)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := a.Client()
	if err != nil {
		t.Fatal(err)
	}
	for _, bucket := range []string{a.Bucket, b.Bucket} {
		for obj := range cl.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
			t.Errorf("new bucket %s holds %q (err %v)", bucket, obj.Key, obj.Err)
		}
	}

	body := []byte("a flight recorder's dump\n")
	if _, err := cl.PutObject(ctx, a.Bucket, "objects/x", bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	obj, err := cl.GetObject(ctx, a.Bucket, "objects/x", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(obj)
	obj.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read back %q (%v), want %q", got, err, body)
	}
	if _, err := cl.StatObject(ctx, b.Bucket, "objects/x", minio.StatObjectOptions{}); minio.ToErrorResponse(err).Code != "NoSuchKey" {
		t.Errorf("the other bucket: StatObject error %v, want NoSuchKey", err)
	}

	// The server checks signatures: a wrong secret is refused.
	bad, err := minio.New(a.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(a.AccessKey, a.SecretKey+"x", ""), Region: a.Region})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.StatObject(ctx, a.Bucket, "objects/x", minio.StatObjectOptions{}); err == nil {
		t.Error("a request signed with the wrong secret key succeeded")
	}
	if !strings.Contains(a.Log(), "S3Proxy") {
		t.Errorf("Log() lacks s3proxy's output; got %d bytes", len(a.Log()))
	}
}
