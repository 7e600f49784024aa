package images

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"
)

// Config is what a build of the three images takes: where the inputs are,
// how the images are named and labelled, and the pinned Debian packages.
type Config struct {
	// BinDir holds the linux/amd64 binaries spikehunt, spikehunt-agent and
	// spikehunt-operator.
	BinDir string
	// LibCHDB is the embedded ClickHouse engine the spikehunt image carries.
	LibCHDB string
	// OutDir receives <repository>.oci.tar for each image.
	OutDir string
	// CacheDir keeps the Debian root filesystems and the compressed layers
	// between builds; deleting it only costs time.
	CacheDir string

	// Registry and Tag name the images as the chart renders them by
	// default: <Registry>/<repository>:<Tag>.
	Registry string
	Tag      string

	// Labels: org.opencontainers.image.version (Tag), .revision, .source,
	// and .created, which is also the config's created time and the mtime
	// of every file of the layers of our own binaries.
	Revision string
	Source   string
	Created  time.Time

	Debian DebianConfig
}

// DebianConfig pins the Debian packages the images are built from
// (deps/versions.env, IMAGES_DEBIAN_*).
type DebianConfig struct {
	// Suite is a Debian release name; mmdebstrap adds its updates and
	// security suites.
	Suite string
	// Agent are the agent image's tools (name=version), installed on top of
	// the suite's essential set.
	Agent []string
	// Runtime are the packages whose files the spikehunt and operator images
	// take: the C library (libchdb.so and purego's dlopen need it) and the
	// CA certificates.
	Runtime []string
	// Epoch is the mtime every file of the Debian and libchdb.so layers
	// gets, so that those layers change with the pins, not with each commit.
	Epoch time.Time
	// NewestIfGone: when Debian's mirror no longer has a pinned version (it
	// keeps only the newest of each suite), build with the mirror's newest
	// version instead of failing, and say so. `make test` sets it, so that
	// a security update in Debian does not stop the suite; `make images`,
	// which makes what users run, does not.
	NewestIfGone bool
}

// DefaultConfig is the layout of `make images`: inputs and outputs under
// .cache/images, the chart's default registry, the project's source URL.
func DefaultConfig() Config {
	return Config{
		BinDir:   ".cache/images/bin",
		OutDir:   ".cache/images",
		CacheDir: ".cache/images/cache",
		Registry: "ghcr.io/spikehunt",
		Source:   "https://github.com/spikehunt/spikehunt",
		Debian:   DebianConfig{Suite: "bookworm"},
	}
}

var (
	// A reference's tag, as the distribution spec allows it.
	tagRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	// A registry host[:port] and optional path of lowercase components.
	registryRE = regexp.MustCompile(`^[A-Za-z0-9.-]+(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*$`)
	// A Debian package pinned to an exact version.
	pinRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+=[A-Za-z0-9.+~:-]+$`)
)

// Validate reports every problem of c; it does not change c.
func (c Config) Validate() error {
	var errs []error
	for _, f := range []struct{ name, v string }{{"bin dir", c.BinDir}, {"libchdb", c.LibCHDB}, {"out dir", c.OutDir}, {"cache dir", c.CacheDir}, {"revision", c.Revision}, {"source", c.Source}} {
		if f.v == "" {
			errs = append(errs, fmt.Errorf("images: %s is empty", f.name))
		}
	}
	if !registryRE.MatchString(c.Registry) {
		errs = append(errs, fmt.Errorf("images: registry %q is not host[:port][/path] (e.g. ghcr.io/spikehunt)", c.Registry))
	}
	if !tagRE.MatchString(c.Tag) {
		errs = append(errs, fmt.Errorf("images: tag %q is not a valid tag (the chart's appVersion, e.g. 0.1.0)", c.Tag))
	}
	if c.Created.IsZero() {
		errs = append(errs, errors.New("images: created time is unset: give SOURCE_DATE_EPOCH (the commit's time: git log -1 --format=%ct)"))
	}
	if c.Debian.Suite == "" {
		errs = append(errs, errors.New("images: Debian suite is empty (IMAGES_DEBIAN_SUITE in deps/versions.env)"))
	}
	if c.Debian.Epoch.IsZero() {
		errs = append(errs, errors.New("images: the pinned layers' epoch is unset (IMAGES_PINNED_EPOCH in deps/versions.env)"))
	}
	for _, set := range []struct {
		name string
		pins []string
	}{{"IMAGES_AGENT_PACKAGES", c.Debian.Agent}, {"IMAGES_RUNTIME_PACKAGES", c.Debian.Runtime}} {
		if len(set.pins) == 0 {
			errs = append(errs, fmt.Errorf("images: %s is empty (deps/versions.env)", set.name))
		}
		for _, p := range set.pins {
			if !pinRE.MatchString(p) {
				errs = append(errs, fmt.Errorf("images: %s: %q is not name=version: pin every package (apt-cache policy NAME shows the versions)", set.name, p))
			}
		}
	}
	return errors.Join(errs...)
}

// Ref is the name an image is imported and pushed under:
// <Registry>/<repository>:<Tag>.
func (c Config) Ref(repository string) string {
	return path.Join(c.Registry, repository) + ":" + c.Tag
}

// packageNames drops the versions of name=version pins.
func packageNames(pins []string) []string {
	out := make([]string, len(pins))
	for i, p := range pins {
		out[i], _, _ = strings.Cut(p, "=")
	}
	return out
}
