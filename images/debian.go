package images

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ErrNeedsRoot is returned by Build when a Debian root filesystem is not
// cached and the build does not run as root, which making it needs.
var ErrNeedsRoot = errors.New("images: root needed")

// rootfsSpec is one Debian root filesystem made by mmdebstrap.
//
// mmdebstrap resolves the dependencies of the pinned packages with apt
// (which checks the archive's signatures), runs the packages' maintainer
// scripts in a chroot (perf's diversion of the linux-base wrapper, the CA
// bundle), and with SOURCE_DATE_EPOCH writes the same tarball for the same
// mirror content. Fetching .debs and unpacking them by hand would do none
// of the first two.
type rootfsSpec struct {
	name string
	// variant is mmdebstrap's: "essential" installs the Essential:yes set
	// with dpkg and its database; "extract" only unpacks the packages and
	// their dependencies.
	variant string
	pins    []string
	// hooks run after the packages are in, with the root as "$1".
	hooks    []string
	dpkgOpts []string
}

// docsExcluded leaves out manuals, translations and docs, but keeps each
// package's copyright file.
var docsExcluded = []string{
	"path-exclude=/usr/share/man/*",
	"path-exclude=/usr/share/locale/*",
	"path-exclude=/usr/share/info/*",
	"path-exclude=/usr/share/lintian/*",
	"path-exclude=/usr/share/doc/*",
	"path-include=/usr/share/doc/*/copyright",
}

// reproducible drops the two files mmdebstrap copies from the host.
const reproducible = `rm -f "$1/etc/resolv.conf" "$1/etc/hostname"`

// rootfs returns the tarball of spec, made once per spec, suite and epoch
// and then kept in cacheDir. Making it needs root (mmdebstrap's root mode)
// and Debian's archive.
func rootfs(ctx context.Context, cacheDir string, deb DebianConfig, spec rootfsSpec) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "rootfs/1\x00%s\x00%s\x00%d\x00%q\x00%q\x00%q", deb.Suite, spec.variant, deb.Epoch.Unix(), spec.pins, spec.hooks, spec.dpkgOpts)
	dir := filepath.Join(cacheDir, "rootfs")
	out := filepath.Join(dir, spec.name+"-"+hex.EncodeToString(h.Sum(nil))[:16]+".tar")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("%w: the %s image's Debian root filesystem is not cached, and mmdebstrap --mode=root makes it: run make images as root", ErrNeedsRoot, spec.name)
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		return "", errors.New("mmdebstrap not found: apt-get install mmdebstrap (it builds the images' Debian layers; make deps installs it as root)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	err := mmdebstrap(ctx, deb, spec, spec.pins, out)
	if err == nil || !deb.NewestIfGone {
		return out, err
	}
	// The pins are the cache key: a build with the mirror's newest
	// versions is kept apart from them, and made again once they return.
	newest := strings.TrimSuffix(out, ".tar") + "-newest.tar"
	if _, statErr := os.Stat(newest); statErr == nil {
		return newest, nil
	}
	fmt.Fprintf(os.Stderr, "images: WARNING: %v\nimages: WARNING: building the %s root filesystem with the mirror's newest %s instead of the pins (NewestIfGone); bump the pins in deps/versions.env\n",
		err, spec.name, strings.Join(packageNames(spec.pins), " "))
	if err := mmdebstrap(ctx, deb, spec, packageNames(spec.pins), newest); err != nil {
		return "", err
	}
	return newest, nil
}

// mmdebstrap makes the tarball out of spec with the packages include.
func mmdebstrap(ctx context.Context, deb DebianConfig, spec rootfsSpec, include []string, out string) error {
	tmp := out + ".tmp"
	defer os.Remove(tmp)
	args := []string{"--mode=root", "--format=tar", "--variant=" + spec.variant, "--include=" + strings.Join(include, ",")}
	for _, o := range spec.dpkgOpts {
		args = append(args, "--dpkgopt="+o)
	}
	for _, hk := range append([]string{reproducible}, spec.hooks...) {
		args = append(args, "--customize-hook="+hk)
	}
	// No mirror given: mmdebstrap uses Debian's, with the release's
	// updates and security suites.
	args = append(args, deb.Suite, tmp)
	cmd := exec.CommandContext(ctx, "mmdebstrap", args...)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(deb.Epoch.Unix(), 10), "LC_ALL=C.UTF-8")
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mmdebstrap %s (%s): %w\n%s\n(a pinned version the mirror no longer has? `apt-get update && apt-cache policy %s` lists the versions it has; bump them in deps/versions.env)",
			spec.name, strings.Join(include, " "), err, lastLines(log.String(), 15), strings.Join(packageNames(include), " "))
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "images: made the %s root filesystem in %s (%s)\n", spec.name, time.Since(start).Round(time.Second), filepath.Base(out))
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
