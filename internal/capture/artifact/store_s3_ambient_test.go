package artifact_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/minio/minio-go/v7"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

func ambientConfig(srv *testenv.S3Server) artifact.S3StoreConfig {
	return artifact.S3StoreConfig{
		Endpoint:    srv.Endpoint,
		Region:      srv.Region,
		Bucket:      srv.Bucket,
		Insecure:    true,
		Credentials: artifact.S3CredentialsAmbient,
	}
}

// The credentials come from testenv.ContainerCredentials, which speaks the
// EKS Pod Identity agent's documented protocol on loopback and hands out
// s3proxy's keys: the identity side stands in for EKS, the S3 side is real.
func TestStoreS3WithAmbientCredentialsFromEKSPodIdentityPutsAndGetsInTheRealBucket(t *testing.T) {
	srv := testenv.S3(t)
	testenv.NoAWSIdentity(t)
	agent := testenv.StartContainerCredentials(t, srv.AccessKey, srv.SecretKey, 6*time.Hour)
	agent.Use(t)

	ctx := context.Background()
	s, err := artifact.OpenS3Store(ctx, ambientConfig(srv))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	md, dir := sealed(t, "cap-ambient", [2]string{"perf.data", "samples"}, [2]string{"requests.jsonl", "{}\n"})
	if _, err := s.Put(ctx, md, dir); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, md.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(md, got); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}
	if body, err := readAll(t, s, md.ID, "perf.data"); err != nil || body != "samples" {
		t.Errorf("Open perf.data = %q, %v; want samples", body, err)
	}
	cl, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.StatObject(ctx, srv.Bucket, "captures/cap-ambient.json", minio.StatObjectOptions{}); err != nil {
		t.Errorf("the record is not in the bucket: %v", err)
	}
	// Six hours of validity: one look serves every request.
	if n := agent.Asked(); n != 1 {
		t.Errorf("the credentials endpoint was asked %d times, want 1", n)
	}
}

func TestStoreS3WithAmbientCredentialsAndAWrongPodIdentityTokenSaysWhichSourceRefused(t *testing.T) {
	srv := testenv.S3(t)
	testenv.NoAWSIdentity(t)
	agent := testenv.StartContainerCredentials(t, srv.AccessKey, srv.SecretKey, 6*time.Hour)
	agent.Use(t)
	if err := os.WriteFile(agent.TokenFile, []byte("a-token-of-another-pod"), 0o600); err != nil {
		t.Fatal(err)
	}

	_, err := artifact.OpenS3Store(context.Background(), ambientConfig(srv))
	if err == nil {
		t.Fatal("OpenS3Store with a refused token succeeded")
	}
	for _, want := range []string{"EKS Pod Identity", agent.URI, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "403", "Pod Identity association"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	t.Logf("%v", err)
	if agent.Refused() == 0 {
		t.Error("the credentials endpoint was never asked")
	}
}

func TestStoreS3WithAmbientCredentialsAndNoIdentityNamesWhereItLookedAndHowToGiveOne(t *testing.T) {
	srv := testenv.S3(t)
	testenv.NoAWSIdentity(t)
	// A closed port where the metadata service would be: a host outside EC2.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", closed)

	_, err = artifact.OpenS3Store(context.Background(), ambientConfig(srv))
	if !errors.Is(err, artifact.ErrNoAmbientCredentials) {
		t.Fatalf("OpenS3Store = %v, want ErrNoAmbientCredentials", err)
	}
	for _, want := range []string{
		"AWS_ACCESS_KEY_ID", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "EC2 instance metadata at " + closed,
		"eks.amazonaws.com/role-arn", "agent.serviceAccount.annotations", "operator.serviceAccount.annotations",
		"EKS Pod Identity association", "s3.credentials: keys",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}

	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	_, err = artifact.OpenS3Store(context.Background(), ambientConfig(srv))
	if !errors.Is(err, artifact.ErrNoAmbientCredentials) || !strings.Contains(err.Error(), "AWS_EC2_METADATA_DISABLED=true") {
		t.Fatalf("OpenS3Store with the metadata service off = %v, want ErrNoAmbientCredentials naming AWS_EC2_METADATA_DISABLED", err)
	}
}

// A metadata address that accepts connections and never answers (a
// firewall that lets SYNs through to a dead proxy, a hung service): minio-go
// alone gives up on the IMDSv2 token after 1 s and then waits on IMDSv1
// for its transport's 1 min response header timeout.
func TestStoreS3WithAmbientCredentialsGivesUpOnASilentMetadataServiceWithinSeconds(t *testing.T) {
	srv := testenv.S3(t)
	testenv.NoAWSIdentity(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	held := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held <- c // read nothing, answer nothing
		}
	}()
	defer func() {
		for {
			select {
			case c := <-held:
				c.Close()
			default:
				return
			}
		}
	}()
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://"+ln.Addr().String())

	start := time.Now()
	_, err = artifact.OpenS3Store(context.Background(), ambientConfig(srv))
	took := time.Since(start)
	if !errors.Is(err, artifact.ErrNoAmbientCredentials) || !strings.Contains(err.Error(), "no answer within") {
		t.Fatalf("OpenS3Store = %v, want ErrNoAmbientCredentials saying the metadata service did not answer", err)
	}
	if took > 20*time.Second {
		t.Errorf("OpenS3Store took %s against a silent metadata service, want it bounded (a few seconds)", took)
	}
	t.Logf("gave up after %s: %v", took.Round(time.Millisecond), err)
}

// Temporary keys are renewed once 80% of their lifetime has passed, through
// the same look: a store that lives longer than its first keys keeps
// working.
func TestStoreS3WithAmbientCredentialsRenewsKeysBeforeTheyExpire(t *testing.T) {
	srv := testenv.S3(t)
	testenv.NoAWSIdentity(t)
	agent := testenv.StartContainerCredentials(t, srv.AccessKey, srv.SecretKey, 3*time.Second)
	agent.Use(t)
	ctx := context.Background()
	s, err := artifact.OpenS3Store(ctx, ambientConfig(srv))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	md, dir := sealed(t, "cap-renew", [2]string{"perf.data", "x"})
	if _, err := s.Put(ctx, md, dir); err != nil {
		t.Fatal(err)
	}
	first := agent.Asked()
	time.Sleep(3 * time.Second)
	if _, err := s.Get(ctx, md.ID); err != nil {
		t.Fatalf("Get with renewed keys: %v", err)
	}
	if agent.Asked() <= first {
		t.Errorf("the credentials endpoint was asked %d times before the keys' expiry and %d after, want a renewal", first, agent.Asked())
	}
}

// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY come first, as in the AWS
// SDKs: a developer's shell or a CI job with exported keys works as is.
func TestStoreS3WithAmbientCredentialsTakesKeysFromTheAWSEnvironmentVariables(t *testing.T) {
	srv := testenv.S3(t)
	testenv.NoAWSIdentity(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	s, err := artifact.OpenS3Store(context.Background(), ambientConfig(srv))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	md, dir := sealed(t, "cap-env", [2]string{"perf.data", "x"}, [2]string{"requests.jsonl", "{}\n"})
	if _, err := s.Put(context.Background(), md, dir); err != nil {
		t.Fatal(err)
	}
}
