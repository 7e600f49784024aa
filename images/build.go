// Package images builds spikehunt's container images without a container
// daemon: spikehunt, spikehunt-agent and spikehunt-operator, each an OCI
// image layout in a tar file that `ctr images import`, `skopeo copy
// oci-archive:…` and `docker load` take.
//
// The same inputs give the same bytes: every file of a layer has a fixed
// mtime (the commit's for our binaries, IMAGES_PINNED_EPOCH for Debian's
// files and libchdb.so) and no owner names, layers are gzip-compressed
// by the standard library at one level, and the config's times are the
// commit's. Layers are kept compressed in Config.CacheDir by a key of
// their inputs' paths, sizes and mtimes, so a build whose inputs did not
// change reads no file and compresses nothing.
//
// Build runs mmdebstrap (root) the first time a set of pinned Debian
// packages is asked for; after that the root filesystem is cached too.
package images

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// OCI labels every image carries (the image-spec's annotations keys).
const (
	LabelVersion     = "org.opencontainers.image.version"
	LabelRevision    = "org.opencontainers.image.revision"
	LabelSource      = "org.opencontainers.image.source"
	LabelCreated     = "org.opencontainers.image.created"
	LabelTitle       = "org.opencontainers.image.title"
	LabelDescription = "org.opencontainers.image.description"
)

// Result is one built image.
type Result struct {
	Repository string
	Ref        string
	Digest     v1.Hash
	Archive    string
	// ArchiveSize is the archive's size in bytes; UncompressedSize the sum
	// of its layers' tar streams.
	ArchiveSize, UncompressedSize int64
	// Written is false when the archive already held this image.
	Written bool
}

// Build builds every image of Definitions into cfg.OutDir.
func Build(ctx context.Context, cfg Config) ([]Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	for _, b := range []string{"spikehunt", "spikehunt-agent", "spikehunt-operator"} {
		if err := checkBinary(filepath.Join(cfg.BinDir, b)); err != nil {
			return nil, err
		}
	}
	if err := checkBinary(cfg.LibCHDB); err != nil {
		return nil, fmt.Errorf("%w (run make deps-demo, or set SPIKEHUNT_LIBCHDB)", err)
	}
	runtimeTar, err := rootfs(ctx, cfg.CacheDir, cfg.Debian, runtimeRootfs(cfg.Debian))
	if err != nil {
		return nil, err
	}
	agentTar, err := rootfs(ctx, cfg.CacheDir, cfg.Debian, agentRootfs(cfg.Debian))
	if err != nil {
		return nil, err
	}
	defs := Definitions(cfg, runtimeTar, agentTar)
	cache := layerCache{dir: filepath.Join(cfg.CacheDir, "layers")}
	built, keep, err := buildLayers(cache, defs)
	if err != nil {
		return nil, err
	}
	// What this build did not use goes: each commit makes new layers of
	// the binaries, and the cache would grow by them forever.
	keep[runtimeTar], keep[agentTar] = true, true
	if err := prune(keep, cache.dir, filepath.Join(cfg.CacheDir, "rootfs")); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return nil, err
	}
	var out []Result
	for i, d := range defs {
		img, err := assemble(cfg, d, built[i])
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", d.Repository, err)
		}
		r := Result{Repository: d.Repository, Ref: cfg.Ref(d.Repository), Archive: filepath.Join(cfg.OutDir, d.Repository+".oci.tar")}
		if r.Digest, err = img.Digest(); err != nil {
			return nil, err
		}
		if r.Written, err = writeArchive(r.Archive, img, r.Ref, cfg.Tag, cfg.Created); err != nil {
			return nil, fmt.Errorf("image %s: write %s: %w", d.Repository, r.Archive, err)
		}
		fi, err := os.Stat(r.Archive)
		if err != nil {
			return nil, err
		}
		r.ArchiveSize = fi.Size()
		for _, l := range built[i] {
			r.UncompressedSize += l.usize
		}
		out = append(out, r)
	}
	return out, nil
}

// checkBinary checks that p is an x86-64 ELF file: an image for
// linux/amd64 must not carry a binary built for the host by mistake.
func checkBinary(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("images: %s: %w (make images builds it with GOOS=linux GOARCH=amd64)", p, err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("images: %s is built for %s, want x86-64 (GOOS=linux GOARCH=amd64)", p, f.Machine)
	}
	return nil
}

// buildLayers builds each distinct layer once, as many at a time as there
// are CPUs (compression is most of the cost), and returns them per
// definition, with the set of cache files they are.
func buildLayers(cache layerCache, defs []Definition) ([][]*layer, map[string]bool, error) {
	type job struct {
		spec LayerSpec
		l    *layer
		err  error
		done chan struct{}
	}
	jobs := map[string]*job{}
	var order []*job
	keys := make([][]string, len(defs))
	for i, d := range defs {
		for _, s := range d.Layers {
			k, err := s.key()
			if err != nil {
				return nil, nil, fmt.Errorf("image %s, layer %q: %w", d.Repository, s.CreatedBy, err)
			}
			keys[i] = append(keys[i], k)
			if jobs[k] == nil {
				jobs[k] = &job{spec: s, done: make(chan struct{})}
				order = append(order, jobs[k])
			}
		}
	}
	sem := make(chan struct{}, runtime.NumCPU())
	var wg sync.WaitGroup
	for _, j := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			j.l, j.err = cache.build(j.spec)
		}()
	}
	wg.Wait()
	var errs []error
	for _, j := range order {
		errs = append(errs, j.err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	out := make([][]*layer, len(defs))
	files := map[string]bool{}
	for i := range defs {
		for _, k := range keys[i] {
			out[i] = append(out[i], jobs[k].l)
			files[filepath.Join(cache.dir, k+".json")] = true
			files[jobs[k].l.path] = true
		}
	}
	return out, files, nil
}

// prune removes the files of dirs that keep does not hold.
func prune(keep map[string]bool, dirs ...string) error {
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			if !e.IsDir() && !keep[p] {
				if err := os.Remove(p); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// assemble makes the OCI image of d from its built layers.
func assemble(cfg Config, d Definition, layers []*layer) (v1.Image, error) {
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	adds := make([]mutate.Addendum, len(layers))
	for i, l := range layers {
		adds[i] = mutate.Addendum{
			Layer:     l,
			MediaType: types.OCILayer,
			History:   v1.History{Created: v1.Time{Time: d.Layers[i].ModTime.UTC()}, CreatedBy: d.Layers[i].CreatedBy, Comment: "spikehunt images/"},
		}
	}
	img, err := mutate.Append(img, adds...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	created := cfg.Created.UTC()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: created}
	cf.Config = v1.Config{
		Entrypoint: d.Entrypoint,
		User:       d.User,
		Env:        d.Env,
		WorkingDir: "/",
		Labels: map[string]string{
			LabelVersion:     cfg.Tag,
			LabelRevision:    cfg.Revision,
			LabelSource:      cfg.Source,
			LabelCreated:     created.Format("2006-01-02T15:04:05Z"),
			LabelTitle:       d.Repository,
			LabelDescription: d.Description,
		},
	}
	return mutate.ConfigFile(img, cf)
}
