// Command spikehunt-images builds spikehunt's three container images as
// OCI archives (images/; `make images` runs it after building the
// binaries for linux/amd64).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spikehunt/spikehunt/images"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "spikehunt-images:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	cfg := images.DefaultConfig()
	fs := flag.NewFlagSet("spikehunt-images", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: spikehunt-images [flags]

Builds the spikehunt, spikehunt-agent and spikehunt-operator images as OCI
archives (<out>/<repository>.oci.tar) from the binaries in --bin, libchdb.so
and the Debian packages pinned in --versions, and prints each image's name,
digest and size. Import one with
  ctr -n k8s.io images import <out>/spikehunt.oci.tar
or push it with
  skopeo copy oci-archive:<out>/spikehunt.oci.tar docker://REGISTRY/spikehunt:TAG

The first build runs mmdebstrap as root; later builds reuse the cached
root filesystems and layers (--cache).

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.BinDir, "bin", cfg.BinDir, "folder holding the linux/amd64 binaries spikehunt, spikehunt-agent and spikehunt-operator")
	fs.StringVar(&cfg.LibCHDB, "libchdb", os.Getenv("SPIKEHUNT_LIBCHDB"), "libchdb.so for the spikehunt image (default $SPIKEHUNT_LIBCHDB, which make exports)")
	fs.StringVar(&cfg.OutDir, "out", cfg.OutDir, "folder for the archives")
	fs.StringVar(&cfg.CacheDir, "cache", cfg.CacheDir, "folder for the cached root filesystems and layers")
	fs.StringVar(&cfg.Registry, "registry", cfg.Registry, "registry and path the images are named under: the chart's image.registry")
	fs.StringVar(&cfg.Tag, "tag", "", "tag of every image (default: appVersion of --chart, which the chart's image tag defaults to)")
	chart := fs.String("chart", "helm/spikehunt/Chart.yaml", "the chart whose appVersion is the default tag")
	fs.StringVar(&cfg.Revision, "revision", "", "the git commit, for org.opencontainers.image.revision (required)")
	fs.StringVar(&cfg.Source, "source", cfg.Source, "org.opencontainers.image.source")
	epoch := fs.String("source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "Unix seconds of the commit: the images' created time and their binaries' mtime (default $SOURCE_DATE_EPOCH)")
	versions := fs.String("versions", "deps/versions.env", "the pinned versions file holding IMAGES_DEBIAN_SUITE, IMAGES_AGENT_PACKAGES, IMAGES_RUNTIME_PACKAGES and IMAGES_PINNED_EPOCH")
	manifest := fs.String("manifest", "", "also write the results as JSON here (default <out>/images.json)")
	unprivileged := fs.String("unprivileged", "fail", `when a Debian root filesystem must be made and this is not root: "fail", or "skip" the images (make test's choice: the image tests then skip, or fail under SPIKEHUNT_REQUIRE_PRIVILEGED=1)`)
	fs.String("missing-pin", "fail", `when Debian's mirror no longer has a pinned package version: "fail", or build with its "newest" and warn (make test's choice, so that a Debian security update does not stop the suite; the versions used are in the agent image's dpkg database)`)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	missingPin := fs.Lookup("missing-pin").Value.String()
	if missingPin != "fail" && missingPin != "newest" {
		return fmt.Errorf("--missing-pin %q: want fail or newest", missingPin)
	}
	cfg.Debian.NewestIfGone = missingPin == "newest"
	if *unprivileged != "fail" && *unprivileged != "skip" {
		return fmt.Errorf("--unprivileged %q: want fail or skip", *unprivileged)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: every input is a flag (-h lists them)", fs.Args())
	}
	if cfg.Tag == "" {
		v, err := appVersion(*chart)
		if err != nil {
			return err
		}
		cfg.Tag = v
	}
	if *epoch != "" {
		sec, err := strconv.ParseInt(*epoch, 10, 64)
		if err != nil {
			return fmt.Errorf("--source-date-epoch %q: want Unix seconds (git log -1 --format=%%ct)", *epoch)
		}
		cfg.Created = time.Unix(sec, 0).UTC()
	}
	if err := readVersions(*versions, &cfg.Debian); err != nil {
		return err
	}
	if *manifest == "" {
		*manifest = cfg.OutDir + "/images.json"
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	results, err := images.Build(ctx, cfg)
	if errors.Is(err, images.ErrNeedsRoot) && *unprivileged == "skip" {
		fmt.Printf("images: skipped, not root: %v\n", err)
		return nil
	}
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tDIGEST\tARCHIVE\tUNPACKED\t")
	for _, r := range results {
		state := ""
		if !r.Written {
			state = " (unchanged)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s%s\t%s\t\n", r.Ref, r.Digest, mib(r.ArchiveSize), state, mib(r.UncompressedSize))
	}
	tw.Flush()
	fmt.Printf("images: built in %s into %s; set <component>.image.digest in the chart to pin a digest\n", time.Since(start).Round(100*time.Millisecond), cfg.OutDir)
	type entry struct {
		Repository string `json:"repository"`
		Ref        string `json:"ref"`
		Digest     string `json:"digest"`
		Archive    string `json:"archive"`
		Size       int64  `json:"size"`
	}
	var list []entry
	for _, r := range results {
		list = append(list, entry{r.Repository, r.Ref, r.Digest.String(), r.Archive, r.ArchiveSize})
	}
	b, _ := json.MarshalIndent(list, "", "  ")
	return os.WriteFile(*manifest, append(b, '\n'), 0o644)
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// appVersion reads a Chart.yaml's appVersion line.
func appVersion(chart string) (string, error) {
	b, err := os.ReadFile(chart)
	if err != nil {
		return "", fmt.Errorf("read the chart for its appVersion: %w (or give --tag)", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "appVersion:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"'`), nil
		}
	}
	return "", fmt.Errorf("%s has no appVersion (or give --tag)", chart)
}

// readVersions reads the IMAGES_* pins of a KEY=VALUE shell file.
func readVersions(file string, deb *images.DebianConfig) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("read the pinned versions: %w", err)
	}
	defer f.Close()
	vals := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		vals[k] = strings.Trim(v, `"'`)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if v := vals["IMAGES_DEBIAN_SUITE"]; v != "" {
		deb.Suite = v
	}
	deb.Agent = strings.Fields(vals["IMAGES_AGENT_PACKAGES"])
	deb.Runtime = strings.Fields(vals["IMAGES_RUNTIME_PACKAGES"])
	if v := vals["IMAGES_PINNED_EPOCH"]; v != "" {
		sec, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%s: IMAGES_PINNED_EPOCH %q: want Unix seconds", file, v)
		}
		deb.Epoch = time.Unix(sec, 0).UTC()
	}
	return nil
}
