package artifact_test

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
)

func TestStoreConfigLoadsTheExamples(t *testing.T) {
	f, err := os.Open("testdata/store_config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	var got []artifact.StoreConfig
	for {
		var c artifact.StoreConfig
		if err := dec.Decode(&c); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("example %d: %v", len(got)+1, err)
		}
		got = append(got, c)
	}
	want := []artifact.StoreConfig{
		{Local: &artifact.LocalStoreConfig{Dir: "/var/lib/spikehunt/captures"}},
		{S3: &artifact.S3StoreConfig{
			Endpoint:      "minio.storage.svc:9000",
			Region:        "eu-west-1",
			Bucket:        "spikehunt-captures",
			Prefix:        "prod/eu",
			AccessKeyEnv:  "S3_ACCESS_KEY",
			SecretKeyFile: "/etc/spikehunt/s3/secret-key",
			CAFile:        "/etc/spikehunt/s3/ca.pem",
			PartSize:      16 << 20,
		}},
		{S3: &artifact.S3StoreConfig{
			Endpoint:    "s3.eu-west-1.amazonaws.com",
			Region:      "eu-west-1",
			Bucket:      "spikehunt-captures",
			Credentials: artifact.S3CredentialsAmbient,
		}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("examples (-want +got):\n%s", diff)
	}
}

func TestStoreConfigValidateSaysWhatToFix(t *testing.T) {
	good := artifact.S3StoreConfig{Endpoint: "s3.amazonaws.com", Bucket: "captures", AccessKey: "AKIA", SecretKeyEnv: "S3_SECRET"}
	s3 := func(change func(c *artifact.S3StoreConfig)) artifact.StoreConfig {
		c := good
		change(&c)
		return artifact.StoreConfig{S3: &c}
	}
	tests := []struct {
		name    string
		cfg     artifact.StoreConfig
		mention string // "" for a valid configuration
	}{
		{"a bucket with keys from the environment", s3(func(c *artifact.S3StoreConfig) {}), ""},
		{"a local folder", artifact.StoreConfig{Local: &artifact.LocalStoreConfig{Dir: "/data"}}, ""},
		{"nothing", artifact.StoreConfig{}, "set local.dir"},
		{"both", artifact.StoreConfig{Local: &artifact.LocalStoreConfig{Dir: "/data"}, S3: &good}, "not both"},
		{"a relative folder", artifact.StoreConfig{Local: &artifact.LocalStoreConfig{Dir: "data"}}, "absolute"},
		{"an empty folder", artifact.StoreConfig{Local: &artifact.LocalStoreConfig{}}, "local.dir is empty"},
		{"an endpoint with a scheme", s3(func(c *artifact.S3StoreConfig) { c.Endpoint = "http://minio:9000" }), "s3.insecure"},
		{"an endpoint with a path", s3(func(c *artifact.S3StoreConfig) { c.Endpoint = "minio:9000/bucket" }), "host:port only"},
		{"an endpoint with a port only", s3(func(c *artifact.S3StoreConfig) { c.Endpoint = ":9000" }), "host or host:port"},
		{"no endpoint", s3(func(c *artifact.S3StoreConfig) { c.Endpoint = "" }), "s3.endpoint is empty"},
		{"an invalid bucket", s3(func(c *artifact.S3StoreConfig) { c.Bucket = "Captures_1" }), "s3.bucket"},
		{"a prefix climbing up", s3(func(c *artifact.S3StoreConfig) { c.Prefix = "prod/../other" }), "s3.prefix"},
		{"a prefix from the root", s3(func(c *artifact.S3StoreConfig) { c.Prefix = "/prod" }), "s3.prefix"},
		{"a prefix with an empty segment", s3(func(c *artifact.S3StoreConfig) { c.Prefix = "prod//eu" }), "s3.prefix"},
		{"a prefix ending in /", s3(func(c *artifact.S3StoreConfig) { c.Prefix = "prod/eu/" }), ""},
		{"two access keys", s3(func(c *artifact.S3StoreConfig) { c.AccessKeyFile = "/k" }), "exactly one of s3.access_key"},
		{"no access key", s3(func(c *artifact.S3StoreConfig) { c.AccessKey = "" }), "exactly one of s3.access_key"},
		{"no secret key", s3(func(c *artifact.S3StoreConfig) { c.SecretKeyEnv = "" }), "never goes in the configuration"},
		{"two secret keys", s3(func(c *artifact.S3StoreConfig) { c.SecretKeyFile = "/s" }), "exactly one of s3.secret_key_env"},
		{"a CA without TLS", s3(func(c *artifact.S3StoreConfig) { c.Insecure, c.CAFile = true, "/ca.pem" }), "s3.ca_file is for TLS"},
		{"parts below S3's minimum", s3(func(c *artifact.S3StoreConfig) { c.PartSize = 1 << 20 }), "s3.part_size"},
		{"parts above S3's maximum", s3(func(c *artifact.S3StoreConfig) { c.PartSize = 6 << 30 }), "s3.part_size"},
		{"keys named as keys", s3(func(c *artifact.S3StoreConfig) { c.Credentials = artifact.S3CredentialsKeys }), ""},
		{"keys mode without keys", s3(func(c *artifact.S3StoreConfig) {
			c.Credentials, c.AccessKey, c.SecretKeyEnv = artifact.S3CredentialsKeys, "", ""
		}), "exactly one of s3.access_key"},
		{"the ambient identity", s3(func(c *artifact.S3StoreConfig) {
			c.Credentials, c.AccessKey, c.SecretKeyEnv = artifact.S3CredentialsAmbient, "", ""
		}), ""},
		{"the ambient identity with keys", s3(func(c *artifact.S3StoreConfig) { c.Credentials = artifact.S3CredentialsAmbient }),
			"takes no keys: remove s3.access_key, s3.secret_key_env"},
		{"the ambient identity with a key file", s3(func(c *artifact.S3StoreConfig) {
			c.Credentials, c.AccessKey, c.SecretKeyEnv, c.SecretKeyFile = artifact.S3CredentialsAmbient, "", "", "/s"
		}), "remove s3.secret_key_file"},
		{"an unknown credentials mode", s3(func(c *artifact.S3StoreConfig) { c.Credentials = "iam" }), "want keys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.mention == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("Validate() = %v, want an error mentioning %q", err, tt.mention)
			}
		})
	}
}

func TestStoreOpenRefusesAnInvalidConfigurationBeforeTouchingAnything(t *testing.T) {
	_, err := artifact.OpenStore(context.Background(), artifact.StoreConfig{S3: &artifact.S3StoreConfig{Endpoint: "127.0.0.1:1", Bucket: "captures"}})
	if err == nil || !strings.Contains(err.Error(), "access_key") {
		t.Fatalf("OpenStore = %v, want the missing keys named", err)
	}
	dir := t.TempDir()
	s, err := artifact.OpenStore(context.Background(), artifact.StoreConfig{Local: &artifact.LocalStoreConfig{Dir: dir}})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}
