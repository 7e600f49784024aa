package artifact_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/minio/minio-go/v7"

	"github.com/spikehunt/spikehunt/agents/capture/artifact"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// ambientVars are every variable the ambient credentials read; each test
// starts with all of them unset, whatever the machine's environment.
var ambientVars = []string{
	"AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SECRET_KEY", "AWS_SESSION_TOKEN",
	"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME", "AWS_REGION",
	"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
	"AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
	"AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_EC2_METADATA_DISABLED",
}

func clearAmbientEnv(t *testing.T) {
	t.Helper()
	for _, v := range ambientVars {
		t.Setenv(v, "") // minio-go treats an empty variable as unset
	}
}

func ambientConfig(srv *testenv.S3Server) artifact.S3StoreConfig {
	return artifact.S3StoreConfig{
		Endpoint:    srv.Endpoint,
		Region:      srv.Region,
		Bucket:      srv.Bucket,
		Insecure:    true,
		Credentials: artifact.S3CredentialsAmbient,
	}
}

// podIdentityAgent serves the container credentials protocol that the EKS
// Pod Identity agent speaks on 169.254.170.23 (and ECS on 169.254.170.2):
// a GET with the token from AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE in its
// Authorization header, answered with JSON keys. It stands in for the
// agent, which runs only on EKS nodes; the wire format is AWS's documented
// one (docs.aws.amazon.com/sdkref/latest/guide/feature-container-credentials.html),
// and the keys it hands out are s3proxy's, so the S3 side is real.
type podIdentityAgent struct {
	uri     string
	token   string
	asked   atomic.Int32
	refused atomic.Int32
}

func startPodIdentityAgent(t *testing.T, srv *testenv.S3Server) *podIdentityAgent {
	t.Helper()
	a := &podIdentityAgent{token: "eyJhbGciOiJSUzI1NiJ9.pod-identity-token"}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/credentials", func(w http.ResponseWriter, r *http.Request) {
		a.asked.Add(1)
		if r.Header.Get("Authorization") != a.token {
			a.refused.Add(1)
			w.WriteHeader(http.StatusForbidden)
			json.NewEncoder(w).Encode(map[string]string{"code": "AccessDeniedException", "message": "invalid token"})
			return
		}
		json.NewEncoder(w).Encode(map[string]string{
			"AccessKeyId":     srv.AccessKey,
			"SecretAccessKey": srv.SecretKey,
			"AccountId":       "123456789012",
			"Token":           "IQoJb3JpZ2luX2VjEPod",
			"Expiration":      time.Now().Add(6 * time.Hour).UTC().Format(time.RFC3339),
		})
	})
	hs := httptest.NewServer(mux) // 127.0.0.1
	t.Cleanup(hs.Close)
	a.uri = hs.URL + "/v1/credentials"
	return a
}

// usePodIdentity sets the variables the EKS Pod Identity webhook injects,
// with the token file holding token.
func usePodIdentity(t *testing.T, a *podIdentityAgent, token string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "eks-pod-identity-token")
	if err := os.WriteFile(file, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", a.uri)
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", file)
}

func TestStoreS3WithAmbientCredentialsFromEKSPodIdentityPutsAndGetsInTheRealBucket(t *testing.T) {
	srv := testenv.S3(t)
	clearAmbientEnv(t)
	agent := startPodIdentityAgent(t, srv)
	usePodIdentity(t, agent, agent.token)

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
	if n := agent.asked.Load(); n != 1 {
		t.Errorf("the credentials endpoint was asked %d times, want 1", n)
	}
}

func TestStoreS3WithAmbientCredentialsAndAWrongPodIdentityTokenSaysWhichSourceRefused(t *testing.T) {
	srv := testenv.S3(t)
	clearAmbientEnv(t)
	agent := startPodIdentityAgent(t, srv)
	usePodIdentity(t, agent, "a-token-of-another-pod")

	_, err := artifact.OpenS3Store(context.Background(), ambientConfig(srv))
	if err == nil {
		t.Fatal("OpenS3Store with a refused token succeeded")
	}
	for _, want := range []string{"EKS Pod Identity", agent.uri, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "403", "Pod Identity association"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if agent.refused.Load() == 0 {
		t.Error("the credentials endpoint was never asked")
	}
}

func TestStoreS3WithAmbientCredentialsAndNoIdentityNamesWhereItLookedAndHowToGiveOne(t *testing.T) {
	srv := testenv.S3(t)
	clearAmbientEnv(t)
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
	clearAmbientEnv(t)
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

// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY come first, as in the AWS
// SDKs: a developer's shell or a CI job with exported keys works as is.
func TestStoreS3WithAmbientCredentialsTakesKeysFromTheAWSEnvironmentVariables(t *testing.T) {
	srv := testenv.S3(t)
	clearAmbientEnv(t)
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
