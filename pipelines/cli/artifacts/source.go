package artifacts

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

// S3Flags are what a capture's s3:// URI does not say: where the server is
// and whose keys to sign with. The bucket and prefix come from the URI.
type S3Flags struct {
	Endpoint    string
	Region      string
	Credentials string // keys or ambient
	AccessEnv   string
	SecretEnv   string
	Insecure    bool
	CAFile      string
}

// source is where one capture's record lives: the store's configuration
// and the record's id in it.
type source struct {
	cfg artifact.StoreConfig
	id  string
}

// sourceOf reads a capture's URI, the record's URL as the agent reported it
// (internal/capture/artifact Location.Metadata):
//
//	file:///<dir>/captures/<id>.json
//	s3://<bucket>/<prefix>captures/<id>.json
//
// and returns the store that holds it. A URI of another form is refused
// with what was expected: it was not written by an agent.
func sourceOf(uri string, s3 S3Flags) (source, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return source{}, fmt.Errorf("capture URI %q: %w", uri, err)
	}
	key := u.Path
	if u.Scheme == "s3" {
		key = strings.TrimPrefix(key, "/")
	}
	dir, file := path.Split(key)
	id, ok := strings.CutSuffix(file, ".json")
	root, inCaptures := strings.CutSuffix(dir, "captures/")
	if !ok || !inCaptures || record.ValidName("capture id", id) != nil {
		return source{}, fmt.Errorf("capture URI %q does not name a capture record (want file:///<dir>/captures/<id>.json or s3://<bucket>/<prefix>captures/<id>.json)", uri)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return source{}, fmt.Errorf("capture URI %q is on host %s: copy its folder here and pass --store-dir", uri, u.Host)
		}
		dir := strings.TrimSuffix(root, "/")
		if dir == "" {
			dir = "/"
		}
		return source{cfg: artifact.StoreConfig{Local: &artifact.LocalStoreConfig{Dir: dir}}, id: id}, nil
	case "s3":
		if s3.Endpoint == "" {
			return source{}, errors.New("the capture is in an S3 bucket: give the server with --s3.endpoint (host:port, env SPIKEHUNT_S3_ENDPOINT)")
		}
		c := &artifact.S3StoreConfig{Endpoint: s3.Endpoint, Region: s3.Region, Bucket: u.Host, Prefix: root,
			Credentials: artifact.S3Credentials(s3.Credentials), Insecure: s3.Insecure, CAFile: s3.CAFile}
		if c.Credentials != artifact.S3CredentialsAmbient {
			c.AccessKeyEnv, c.SecretKeyEnv = s3.AccessEnv, s3.SecretEnv
		}
		return source{cfg: artifact.StoreConfig{S3: c}, id: id}, nil
	}
	return source{}, fmt.Errorf("capture URI %q: scheme %q is not a capture store (file or s3)", uri, u.Scheme)
}
