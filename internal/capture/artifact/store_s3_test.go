package artifact_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/minio/minio-go/v7"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// s3Config is a store on the test's bucket of the real s3proxy, the secret
// key in a file as a mounted Secret would give it.
func s3Config(t *testing.T, srv *testenv.S3Server, prefix string) artifact.S3StoreConfig {
	t.Helper()
	secret := filepath.Join(t.TempDir(), "secret-key")
	if err := os.WriteFile(secret, []byte(srv.SecretKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return artifact.S3StoreConfig{
		Endpoint:      srv.Endpoint,
		Region:        srv.Region,
		Bucket:        srv.Bucket,
		Prefix:        prefix,
		AccessKey:     srv.AccessKey,
		SecretKeyFile: secret,
		Insecure:      true,
	}
}

func openS3(t *testing.T, srv *testenv.S3Server, cfg artifact.S3StoreConfig) storeUnderTest {
	t.Helper()
	ctx := context.Background()
	s, err := artifact.OpenS3Store(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	cl, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	prefix := cfg.Prefix
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return storeUnderTest{
		store: s,
		keys: func(t *testing.T) []string {
			keys := []string{}
			for obj := range cl.ListObjects(ctx, srv.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
				if obj.Err != nil {
					t.Fatal(obj.Err)
				}
				keys = append(keys, strings.TrimPrefix(obj.Key, prefix))
			}
			slices.Sort(keys)
			return keys
		},
		put: func(t *testing.T, key string, b []byte) {
			if _, err := cl.PutObject(ctx, srv.Bucket, prefix+key, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{}); err != nil {
				t.Fatal(err)
			}
		},
		remove: func(t *testing.T, key string) {
			if err := cl.RemoveObject(ctx, srv.Bucket, prefix+key, minio.RemoveObjectOptions{}); err != nil {
				t.Fatal(err)
			}
		},
	}
}

func TestStoreS3(t *testing.T) {
	testStoreContract(t, func(t *testing.T) storeUnderTest {
		srv := testenv.S3(t)
		return openS3(t, srv, s3Config(t, srv, "spikehunt/test"))
	})
}

func TestStoreS3SendsLargeFilesInCheckedParts(t *testing.T) {
	ctx := context.Background()
	srv := testenv.S3(t)
	cfg := s3Config(t, srv, "")
	cfg.PartSize = artifact.MinPartSize
	u := openS3(t, srv, cfg)

	big := make([]byte, 2*artifact.MinPartSize+12345) // three parts, the last short
	rand.Read(big)
	md, dir := sealed(t, "cap-big", [2]string{"perf.data", string(big)}, [2]string{"requests.jsonl", "small"})
	loc, err := u.store.Put(ctx, md, dir)
	if err != nil {
		t.Fatal(err)
	}
	if loc.NewBytes != md.Bytes {
		t.Errorf("NewBytes = %d, want %d", loc.NewBytes, md.Bytes)
	}
	got, err := readAll(t, u.store, "cap-big", "perf.data")
	if err != nil || got != string(big) {
		t.Fatalf("read back %d bytes (%v), want the %d put", len(got), err, len(big))
	}

	// A large file changed after Seal: every part is sent, then the upload
	// is aborted because the whole does not match.
	md2, dir2 := sealed(t, "cap-big-2", [2]string{"perf.data", string(big[:len(big)-1]) + "x"})
	f, err := os.OpenFile(filepath.Join(dir2, "perf.data"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("y"), int64(len(big)-1)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := u.store.Put(ctx, md2, dir2); !errors.Is(err, record.ErrInvalid) {
		t.Errorf("Put of a large file changed after Seal = %v, want ErrInvalid", err)
	}
	// s3proxy cannot list multipart uploads (501), so this checks only
	// that nothing of the aborted upload became an object.
	want := []string{"captures/cap-big.json", objectKey(string(big)), objectKey("small")}
	slices.Sort(want)
	if diff := cmp.Diff(want, u.keys(t)); diff != "" {
		t.Errorf("keys after the aborted upload (-want +got):\n%s", diff)
	}
	if _, err := u.store.Get(ctx, "cap-big-2"); !errors.Is(err, artifact.ErrNotFound) {
		t.Errorf("Get(cap-big-2) = %v, want ErrNotFound", err)
	}
}

func TestStoreS3PrefixesKeepStoresInOneBucketApart(t *testing.T) {
	ctx := context.Background()
	srv := testenv.S3(t)
	prod := openS3(t, srv, s3Config(t, srv, "prod"))
	staging := openS3(t, srv, s3Config(t, srv, "staging/eu/"))
	md, dir := sealed(t, "cap-1", [2]string{"perf.data", "prod dump"})
	if _, err := prod.store.Put(ctx, md, dir); err != nil {
		t.Fatal(err)
	}
	if list, err := staging.store.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("staging lists %v, %v; want nothing", list, err)
	}
	other, otherDir := sealed(t, "cap-1", [2]string{"perf.data", "staging dump"})
	if _, err := staging.store.Put(ctx, other, otherDir); err != nil {
		t.Errorf("the same id under another prefix: %v", err)
	}
	if got, err := readAll(t, prod.store, "cap-1", "perf.data"); err != nil || got != "prod dump" {
		t.Errorf("prod's file: %q, %v", got, err)
	}
}

func TestStoreS3OpenSaysWhatIsWrong(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := testenv.S3(t)
	tests := []struct {
		name    string
		change  func(c *artifact.S3StoreConfig)
		mention string
	}{
		{"a bucket that does not exist", func(c *artifact.S3StoreConfig) { c.Bucket = "no-such-bucket" }, "create it"},
		{"a wrong secret key", func(c *artifact.S3StoreConfig) {
			os.WriteFile(c.SecretKeyFile, []byte("wrong"), 0o600)
		}, "check the endpoint, the keys"},
		{"an empty secret key file", func(c *artifact.S3StoreConfig) { os.WriteFile(c.SecretKeyFile, []byte("\n"), 0o600) }, "is empty"},
		{"an unset secret key variable", func(c *artifact.S3StoreConfig) {
			c.SecretKeyFile, c.SecretKeyEnv = "", "SPIKEHUNT_TEST_UNSET_SECRET"
		}, "SPIKEHUNT_TEST_UNSET_SECRET is empty or unset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := s3Config(t, srv, "")
			tt.change(&cfg)
			s, err := artifact.OpenS3Store(ctx, cfg)
			if err == nil {
				s.Close()
				t.Fatal("OpenS3Store succeeded")
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("error %q does not mention %q", err, tt.mention)
			}
		})
	}
}

func TestStoreS3SecretKeyFromTheEnvironment(t *testing.T) {
	srv := testenv.S3(t)
	cfg := s3Config(t, srv, "")
	cfg.SecretKeyFile, cfg.SecretKeyEnv = "", "SPIKEHUNT_TEST_S3_SECRET"
	t.Setenv("SPIKEHUNT_TEST_S3_SECRET", srv.SecretKey)
	u := openS3(t, srv, cfg)
	md, dir := sealed(t, "cap-1", [2]string{"perf.data", "dump"})
	if _, err := u.store.Put(context.Background(), md, dir); err != nil {
		t.Fatal(err)
	}
}
