package artifact

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
)

// ErrNoAmbientCredentials is returned (wrapped) when s3.credentials is
// ambient and none of the places it looks gave keys.
var ErrNoAmbientCredentials = errors.New("no AWS identity found")

// ambientRetrieveTimeout bounds one look for ambient credentials. minio-go
// bounds only the instance metadata token request (1 s); when that times
// out it falls back to IMDSv1 requests bounded by nothing but the
// transport (a 30 s dial, a 1 min wait for headers), and it renews expired
// keys on a context without the caller's deadline. A host that drops
// packets to 169.254.169.254 would stall the store for a minute or more.
const ambientRetrieveTimeout = 5 * time.Second

// The AWS SDKs' variables for the instance metadata service, honoured here
// because minio-go's IAM provider reads neither.
const (
	envIMDSEndpoint = "AWS_EC2_METADATA_SERVICE_ENDPOINT"
	envIMDSDisabled = "AWS_EC2_METADATA_DISABLED"
)

// ambientCredentials is the AWS identity of the pod or the machine, looked
// for in the order of the AWS SDKs:
//
//  1. AWS_ACCESS_KEY_ID (or AWS_ACCESS_KEY) and AWS_SECRET_ACCESS_KEY (or
//     AWS_SECRET_KEY), with AWS_SESSION_TOKEN if set (minio-go's EnvAWS).
//  2. Then minio-go's IAM provider (pkg/credentials/iam_aws.go), which
//     takes the first of these that is configured and does not fall
//     through to the next when it fails:
//     - IRSA: AWS_WEB_IDENTITY_TOKEN_FILE, with AWS_ROLE_ARN and
//     AWS_ROLE_SESSION_NAME, is sent to STS AssumeRoleWithWebIdentity
//     at https://sts.<AWS_REGION>.amazonaws.com (.com.cn for cn-
//     regions), or https://sts.amazonaws.com without AWS_REGION. EKS's
//     amazon-eks-pod-identity-webhook sets these variables for a
//     ServiceAccount annotated eks.amazonaws.com/role-arn;
//     AWS_ENDPOINT_URL_STS and AWS_STS_REGIONAL_ENDPOINTS are not read.
//     - ECS task roles: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI, from
//     http://169.254.170.2, with AWS_CONTAINER_AUTHORIZATION_TOKEN as
//     the Authorization header if set.
//     - EKS Pod Identity: AWS_CONTAINER_CREDENTIALS_FULL_URI with the
//     token read from AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE as the
//     Authorization header (the file is read as it is: a trailing
//     newline would make the header invalid).
//     - AWS_CONTAINER_CREDENTIALS_FULL_URI alone, only on a loopback
//     host, with AWS_CONTAINER_AUTHORIZATION_TOKEN if set.
//     - The EC2 instance metadata service (IMDSv2 token, IMDSv1 if the
//     token request times out) at http://169.254.169.254, or at
//     AWS_EC2_METADATA_SERVICE_ENDPOINT; skipped when
//     AWS_EC2_METADATA_DISABLED is true.
//
// Every look is bounded by ambientRetrieveTimeout, and a failure says
// where it looked and how to give the pod an identity. Keys with an
// expiry are renewed by minio-go once 80% of their lifetime has passed.
//
// It is safe for concurrent use only through credentials.Credentials,
// which serialises retrievals.
type ambientCredentials struct {
	env     credentials.EnvAWS
	iam     credentials.IAM
	curr    credentials.Provider
	timeout time.Duration
}

func newAmbientCredentials() *credentials.Credentials {
	return credentials.New(&ambientCredentials{timeout: ambientRetrieveTimeout})
}

// Retrieve implements credentials.Provider.
func (a *ambientCredentials) Retrieve() (credentials.Value, error) {
	return a.RetrieveWithCredContext(nil)
}

// RetrieveWithCredContext implements credentials.Provider.
func (a *ambientCredentials) RetrieveWithCredContext(cc *credentials.CredContext) (credentials.Value, error) {
	a.curr = nil
	if v, _ := a.env.RetrieveWithCredContext(cc); v.AccessKeyID != "" && v.SecretAccessKey != "" {
		a.curr = &a.env
		return v, nil
	}
	src := ambientSourceNow()
	if src.kind == sourceIMDS && src.disabled {
		return credentials.Value{}, noAmbientIdentity(src, fmt.Errorf("%s=%s", envIMDSDisabled, os.Getenv(envIMDSDisabled)))
	}
	bounded := credentials.CredContext{}
	if cc != nil {
		bounded = *cc
	}
	parent := bounded.Context
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, a.timeout)
	defer cancel()
	bounded.Context = ctx
	// IAM.Endpoint overrides the STS and ECS endpoints too: set it only
	// when the metadata service is the source.
	a.iam.Endpoint = ""
	if src.kind == sourceIMDS {
		a.iam.Endpoint = src.endpoint
	}
	v, err := a.iam.RetrieveWithCredContext(&bounded)
	if err == nil && (v.AccessKeyID == "" || v.SecretAccessKey == "") {
		err = errors.New("the answer holds no AccessKeyId or SecretAccessKey")
	}
	if err != nil {
		if ctx.Err() != nil && parent.Err() == nil {
			err = fmt.Errorf("no answer within %s: %w", a.timeout, err)
		}
		if src.kind == sourceIMDS {
			return credentials.Value{}, noAmbientIdentity(src, err)
		}
		return credentials.Value{}, fmt.Errorf("capture store: s3.credentials ambient: %s: %w; %s", src.describe(), err, src.hint())
	}
	a.curr = &a.iam
	return v, nil
}

// IsExpired implements credentials.Provider.
func (a *ambientCredentials) IsExpired() bool {
	return a.curr == nil || a.curr.IsExpired()
}

type sourceKind int

const (
	sourceWebIdentity sourceKind = iota
	sourceECS
	sourcePodIdentity
	sourceContainerLoopback
	sourceIMDS
)

// ambientSource is the one source minio-go's IAM provider will use, from
// the same variables in the same order (pkg/credentials/iam_aws.go), so
// that an error can name it.
type ambientSource struct {
	kind     sourceKind
	endpoint string
	disabled bool
}

func ambientSourceNow() ambientSource {
	switch {
	case os.Getenv("AWS_WEB_IDENTITY_TOKEN_FILE") != "":
		return ambientSource{kind: sourceWebIdentity}
	case os.Getenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") != "":
		return ambientSource{kind: sourceECS, endpoint: credentials.DefaultECSRoleEndpoint + os.Getenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")}
	case os.Getenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE") != "" && os.Getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI") != "":
		return ambientSource{kind: sourcePodIdentity, endpoint: os.Getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI")}
	case os.Getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI") != "":
		return ambientSource{kind: sourceContainerLoopback, endpoint: os.Getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI")}
	}
	src := ambientSource{kind: sourceIMDS, endpoint: credentials.DefaultIAMRoleEndpoint}
	if e := os.Getenv(envIMDSEndpoint); e != "" {
		src.endpoint = strings.TrimSuffix(e, "/")
	}
	src.disabled = strings.EqualFold(os.Getenv(envIMDSDisabled), "true")
	return src
}

func (s ambientSource) describe() string {
	switch s.kind {
	case sourceWebIdentity:
		region := os.Getenv("AWS_REGION")
		sts := "https://sts.amazonaws.com"
		switch {
		case strings.HasPrefix(region, "cn-"):
			sts = "https://sts." + region + ".amazonaws.com.cn"
		case region != "":
			sts = "https://sts." + region + ".amazonaws.com"
		}
		return fmt.Sprintf("IRSA: STS AssumeRoleWithWebIdentity at %s for role %q (AWS_ROLE_ARN) with the token in %s (AWS_WEB_IDENTITY_TOKEN_FILE)",
			sts, os.Getenv("AWS_ROLE_ARN"), os.Getenv("AWS_WEB_IDENTITY_TOKEN_FILE"))
	case sourceECS:
		return fmt.Sprintf("ECS task role at %s (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI)", s.endpoint)
	case sourcePodIdentity:
		return fmt.Sprintf("EKS Pod Identity: container credentials at %s (AWS_CONTAINER_CREDENTIALS_FULL_URI) with the token in %s (AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE)",
			s.endpoint, os.Getenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"))
	case sourceContainerLoopback:
		return fmt.Sprintf("container credentials at %s (AWS_CONTAINER_CREDENTIALS_FULL_URI; only a loopback host is accepted without AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE)", s.endpoint)
	default:
		return fmt.Sprintf("EC2 instance metadata at %s", s.endpoint)
	}
}

func (s ambientSource) hint() string {
	switch s.kind {
	case sourceWebIdentity:
		return "check that the role's trust policy admits this ServiceAccount through the cluster's OIDC provider and that AWS_REGION is the cluster's"
	case sourcePodIdentity:
		return "check the EKS Pod Identity association for this namespace and ServiceAccount and that the eks-pod-identity-agent runs on the node"
	case sourceECS:
		return "check the task definition's task role"
	default:
		return "check the endpoint and its token"
	}
}

// noAmbientIdentity is the error for a pod with no identity: nothing in
// its environment, and no instance role either.
func noAmbientIdentity(s ambientSource, imdsErr error) error {
	imds := fmt.Sprintf("the %s gave none (%v)", s.describe(), imdsErr)
	if s.disabled {
		imds = fmt.Sprintf("the EC2 instance metadata service is off (%v)", imdsErr)
	}
	return fmt.Errorf("capture store: s3.credentials ambient: %w: "+
		"AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_WEB_IDENTITY_TOKEN_FILE (IRSA), AWS_CONTAINER_CREDENTIALS_FULL_URI with AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (EKS Pod Identity) "+
		"and AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (ECS) are unset, and %s; "+
		"give the pod an AWS identity: annotate its ServiceAccount with eks.amazonaws.com/role-arn (IRSA; the chart's agent.serviceAccount.annotations and operator.serviceAccount.annotations) "+
		"or create an EKS Pod Identity association for it, or use s3.credentials: keys",
		ErrNoAmbientCredentials, imds)
}
