package artifact

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// StoreConfig says where capture artifacts go: exactly one of Local and S3.
type StoreConfig struct {
	Local *LocalStoreConfig `yaml:"local"`
	S3    *S3StoreConfig    `yaml:"s3"`
}

// LocalStoreConfig is a folder on the node, the configured capture volume.
type LocalStoreConfig struct {
	// Dir is an absolute path that must exist (a hostPath or a mounted
	// volume); the store creates its folders inside.
	Dir string `yaml:"dir"`
}

// S3StoreConfig is a bucket on an S3-compatible server. The secret key is
// never part of the configuration itself, so that it can be logged and
// kept in a ConfigMap: it comes from an environment variable or a file (a
// mounted Secret), or, with Credentials: ambient, from the identity AWS
// gives the pod or the machine.
type S3StoreConfig struct {
	// Endpoint is host or host:port, without a scheme: s3.amazonaws.com,
	// minio.storage:9000.
	Endpoint string `yaml:"endpoint"`
	// Region is the bucket's region; empty asks the server (one more
	// request when the store opens).
	Region string `yaml:"region"`
	// Bucket must exist: the agent never creates one.
	Bucket string `yaml:"bucket"`
	// Prefix is put before every key ("spikehunt/prod/"): path segments
	// of letters, digits, '.', '_' and '-'. A trailing '/' is added.
	Prefix string `yaml:"prefix"`

	// Credentials says where the keys come from: keys (the default) reads
	// the access and secret key fields below; ambient uses the AWS
	// identity of the pod or the machine (IRSA, EKS Pod Identity, an ECS
	// task role, the EC2 instance profile) and takes none of them.
	Credentials S3Credentials `yaml:"credentials"`

	// The access key: inline, or from an environment variable, or from a
	// file; exactly one.
	AccessKey     string `yaml:"access_key"`
	AccessKeyEnv  string `yaml:"access_key_env"`
	AccessKeyFile string `yaml:"access_key_file"`
	// The secret key: from an environment variable or a file; exactly one.
	SecretKeyEnv  string `yaml:"secret_key_env"`
	SecretKeyFile string `yaml:"secret_key_file"`

	// Insecure speaks plain HTTP. Only for a server on the node or in a
	// test: keys are signed, not sent, but the artifacts travel in clear.
	Insecure bool `yaml:"insecure"`
	// CAFile adds the PEM certificates in it to the system's roots, for a
	// server with a private CA.
	CAFile string `yaml:"ca_file"`

	// PartSize is the largest file sent in one request and the part size
	// of larger ones (multipart upload). Each request's body is checked by
	// the server against its sha256, and some servers (s3proxy) hold a
	// whole request in memory to do so. Zero: DefaultPartSize.
	PartSize int64 `yaml:"part_size"`
}

// S3Credentials is where the S3 client's keys come from.
type S3Credentials string

const (
	// S3CredentialsKeys: an access key and a secret key the configuration
	// names (access_key*, secret_key_*). The empty value means this.
	S3CredentialsKeys S3Credentials = "keys"
	// S3CredentialsAmbient: the AWS identity of the pod or the machine,
	// found as ambientCredentials describes (store_s3_ambient.go):
	// AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, IRSA's web identity token,
	// EKS Pod Identity or ECS container credentials, the EC2 instance
	// metadata service. Temporary keys are renewed before they expire.
	S3CredentialsAmbient S3Credentials = "ambient"
)

// Bounds on S3StoreConfig.PartSize: S3's smallest part (but the last) and
// its largest single request.
const (
	DefaultPartSize = 64 << 20
	MinPartSize     = 5 << 20
	MaxPartSize     = 5 << 30
	maxPrefixLen    = 512
)

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*/?$`)

// Validate checks the configuration without touching the network or the
// files it names.
func (c StoreConfig) Validate() error {
	switch {
	case c.Local != nil && c.S3 != nil:
		return errors.New("capture store: set either local or s3, not both")
	case c.Local != nil:
		return c.Local.Validate()
	case c.S3 != nil:
		return c.S3.Validate()
	default:
		return errors.New("capture store: set local.dir (a folder on the node) or s3 (a bucket)")
	}
}

// Validate checks the folder's path.
func (c LocalStoreConfig) Validate() error {
	if c.Dir == "" {
		return errors.New("capture store: local.dir is empty")
	}
	if !filepath.IsAbs(c.Dir) {
		return fmt.Errorf("capture store: local.dir %q must be an absolute path", c.Dir)
	}
	return nil
}

// Validate checks everything but whether the bucket, the credentials and
// the CA file are there (OpenS3Store does).
func (c S3StoreConfig) Validate() error {
	if c.Endpoint == "" {
		return errors.New("capture store: s3.endpoint is empty (host or host:port)")
	}
	if strings.Contains(c.Endpoint, "://") || strings.ContainsAny(c.Endpoint, "/?#@ ") {
		return fmt.Errorf("capture store: s3.endpoint %q: give host or host:port only; plain HTTP is s3.insecure: true", c.Endpoint)
	}
	if host, port, err := net.SplitHostPort(c.Endpoint); err == nil && (host == "" || port == "") {
		return fmt.Errorf("capture store: s3.endpoint %q: give host or host:port", c.Endpoint)
	}
	if err := s3utils.CheckValidBucketNameStrict(c.Bucket); err != nil {
		return fmt.Errorf("capture store: s3.bucket %q: %v", c.Bucket, err)
	}
	if c.Prefix != "" {
		if len(c.Prefix) > maxPrefixLen || !prefixRE.MatchString(c.Prefix) || hasDotSegment(c.Prefix) {
			return fmt.Errorf("capture store: s3.prefix %q: want segments of A-Z a-z 0-9 . _ - separated by single '/', no '.' or '..' segment, no leading '/', at most %d bytes", c.Prefix, maxPrefixLen)
		}
	}
	switch c.Credentials {
	case "", S3CredentialsKeys:
		if n := countSet(c.AccessKey, c.AccessKeyEnv, c.AccessKeyFile); n != 1 {
			return fmt.Errorf("capture store: set exactly one of s3.access_key, s3.access_key_env and s3.access_key_file (%d set)", n)
		}
		if n := countSet(c.SecretKeyEnv, c.SecretKeyFile); n != 1 {
			return fmt.Errorf("capture store: set exactly one of s3.secret_key_env and s3.secret_key_file (%d set); the secret itself never goes in the configuration", n)
		}
	case S3CredentialsAmbient:
		if set := c.keyFieldsSet(); len(set) > 0 {
			return fmt.Errorf("capture store: s3.credentials is ambient (the pod's or the machine's AWS identity), which takes no keys: remove %s, or set s3.credentials: keys to use them", strings.Join(set, ", "))
		}
	default:
		return fmt.Errorf("capture store: s3.credentials %q: want keys (the access and secret key fields) or ambient (the pod's or the machine's AWS identity: IRSA, EKS Pod Identity, the EC2 instance profile)", c.Credentials)
	}
	if c.Insecure && c.CAFile != "" {
		return errors.New("capture store: s3.ca_file is for TLS; s3.insecure turns TLS off")
	}
	if c.PartSize != 0 && (c.PartSize < MinPartSize || c.PartSize > MaxPartSize) {
		return fmt.Errorf("capture store: s3.part_size %d is outside [%d, %d] (5 MiB, 5 GiB)", c.PartSize, MinPartSize, MaxPartSize)
	}
	return nil
}

// keyFieldsSet names the key fields that are set, as the YAML spells them.
func (c S3StoreConfig) keyFieldsSet() []string {
	var set []string
	for _, f := range []struct{ name, value string }{
		{"s3.access_key", c.AccessKey}, {"s3.access_key_env", c.AccessKeyEnv}, {"s3.access_key_file", c.AccessKeyFile},
		{"s3.secret_key_env", c.SecretKeyEnv}, {"s3.secret_key_file", c.SecretKeyFile},
	} {
		if f.value != "" {
			set = append(set, f.name)
		}
	}
	return set
}

func hasDotSegment(prefix string) bool {
	for seg := range strings.SplitSeq(strings.TrimSuffix(prefix, "/"), "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

func countSet(values ...string) int {
	n := 0
	for _, v := range values {
		if v != "" {
			n++
		}
	}
	return n
}

// credentials reads the access and secret keys from where the
// configuration says.
func (c S3StoreConfig) credentials() (access, secret string, err error) {
	if access, err = secretValue("s3.access_key", c.AccessKey, c.AccessKeyEnv, c.AccessKeyFile); err != nil {
		return "", "", err
	}
	if secret, err = secretValue("s3.secret_key", "", c.SecretKeyEnv, c.SecretKeyFile); err != nil {
		return "", "", err
	}
	return access, secret, nil
}

func secretValue(what, inline, env, file string) (string, error) {
	switch {
	case inline != "":
		return inline, nil
	case env != "":
		v := strings.TrimSpace(os.Getenv(env))
		if v == "" {
			return "", fmt.Errorf("capture store: %s_env: environment variable %s is empty or unset", what, env)
		}
		return v, nil
	default:
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("capture store: %s_file: %w", what, err)
		}
		// A mounted Secret or an `echo` often ends with a newline.
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", fmt.Errorf("capture store: %s_file %s is empty", what, file)
		}
		return v, nil
	}
}

// OpenStore validates cfg and opens the store it names.
func OpenStore(ctx context.Context, cfg StoreConfig) (Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Local != nil {
		return OpenLocalStore(cfg.Local.Dir)
	}
	return OpenS3Store(ctx, *cfg.S3)
}
