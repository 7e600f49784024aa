package testenv

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// ContainerCredentials is an HTTP server on 127.0.0.1 that speaks AWS's
// container credentials protocol, as the EKS Pod Identity agent does on
// 169.254.170.23 (and the ECS agent on 169.254.170.2): a GET whose
// Authorization header must be the pod's token, answered with JSON keys
// (AccessKeyId, SecretAccessKey, Token, AccountId, Expiration), or 403.
// The wire format is AWS's documented one
// (docs.aws.amazon.com/sdkref/latest/guide/feature-container-credentials.html).
//
// It stands in for the Pod Identity agent, which runs only on EKS nodes;
// the keys it hands out are the test's s3proxy's, so that the S3 side of a
// test stays real. It is closed when the test ends.
type ContainerCredentials struct {
	// URI is what AWS_CONTAINER_CREDENTIALS_FULL_URI names.
	URI string
	// Token is what the Authorization header must carry, and TokenFile a
	// file holding it (AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE), without a
	// newline as the projected token EKS mounts.
	Token, TokenFile string

	asked, refused atomic.Int32
}

// StartContainerCredentials serves accessKey and secretKey (and a session
// token, which s3proxy ignores) valid for lifetime from each request.
func StartContainerCredentials(t testing.TB, accessKey, secretKey string, lifetime time.Duration) *ContainerCredentials {
	t.Helper()
	c := &ContainerCredentials{Token: "eyJhbGciOiJSUzI1NiJ9.test-pod-identity-token"}
	c.TokenFile = filepath.Join(t.TempDir(), "eks-pod-identity-token")
	if err := os.WriteFile(c.TokenFile, []byte(c.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/credentials", func(w http.ResponseWriter, r *http.Request) {
		c.asked.Add(1)
		if r.Header.Get("Authorization") != c.Token {
			c.refused.Add(1)
			w.WriteHeader(http.StatusForbidden)
			json.NewEncoder(w).Encode(map[string]string{"code": "AccessDeniedException", "message": "the token is not valid"})
			return
		}
		json.NewEncoder(w).Encode(map[string]string{
			"AccessKeyId":     accessKey,
			"SecretAccessKey": secretKey,
			"Token":           "IQoJb3JpZ2luX2VjEPod-session-token",
			"AccountId":       "123456789012",
			"Expiration":      time.Now().Add(lifetime).UTC().Format(time.RFC3339Nano),
		})
	})
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	c.URI = hs.URL + "/v1/credentials"
	return c
}

// Use sets the two variables EKS Pod Identity puts in a pod's containers,
// for the rest of the test.
func (c *ContainerCredentials) Use(t testing.TB) {
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", c.URI)
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", c.TokenFile)
}

// Asked is how many requests came, Refused how many of them carried a
// wrong token.
func (c *ContainerCredentials) Asked() int   { return int(c.asked.Load()) }
func (c *ContainerCredentials) Refused() int { return int(c.refused.Load()) }

// awsCredentialVars are the variables through which an AWS credential
// chain finds an identity (minio-go's EnvAWS and IAM providers, and the
// SDKs' metadata service settings).
var awsCredentialVars = []string{
	"AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SECRET_KEY", "AWS_SESSION_TOKEN",
	"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME", "AWS_REGION",
	"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
	"AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
	"AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_EC2_METADATA_DISABLED",
}

// NoAWSIdentity empties, for the rest of the test, every variable that
// gives a process an AWS identity, whatever the machine running the test
// has set; minio-go, like the AWS SDKs, treats an empty variable as unset.
// The EC2 metadata service is not among them: point
// AWS_EC2_METADATA_SERVICE_ENDPOINT somewhere or turn it off with
// AWS_EC2_METADATA_DISABLED.
func NoAWSIdentity(t testing.TB) {
	for _, v := range awsCredentialVars {
		t.Setenv(v, "")
	}
}
