package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"go.yaml.in/yaml/v3"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// ImagesDirEnv names the folder of the archives `make images` built; the
// Makefile exports it, and `make test` builds the images first.
const ImagesDirEnv = "SPIKEHUNT_IMAGES_DIR"

// builtImage is one archive of `make images`, read back and unpacked.
type builtImage struct {
	ref    string
	img    v1.Image
	config *v1.ConfigFile
	root   string // the image's root filesystem, unpacked
}

var repositories = []string{"spikehunt", "spikehunt-agent", "spikehunt-operator"}

// loadBuilt reads the archive of repository from $SPIKEHUNT_IMAGES_DIR
// and unpacks its layers in order. Building them needs root and Debian's
// archive (mmdebstrap), so a missing archive is a privileged skip, which
// SPIKEHUNT_REQUIRE_PRIVILEGED=1 turns into a failure.
func loadBuilt(t *testing.T, repository string) builtImage {
	t.Helper()
	dir := os.Getenv(ImagesDirEnv)
	archive := filepath.Join(dir, repository+".oci.tar")
	if dir == "" {
		testenv.RequirePrivileged(t, "the images of make images", fmt.Errorf("%s is unset (make images builds them, as root, and make exports it)", ImagesDirEnv))
	}
	if _, err := os.Stat(archive); err != nil {
		testenv.RequirePrivileged(t, "the images of make images", fmt.Errorf("%w (run make images as root)", err))
	}
	ref, img := readLayout(t, archive)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		if err := unpackLayer(root, l); err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
	}
	return builtImage{ref: ref, img: img, config: cf, root: root}
}

// unpackLayer applies a layer onto root (our images have no whiteouts).
// As root, ownership is kept.
func unpackLayer(root string, l v1.Layer) error {
	rc, err := l.Uncompressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := cleanName(h.Name)
		if name == "" {
			continue
		}
		if strings.HasPrefix(filepath.Base(name), ".wh.") {
			return fmt.Errorf("whiteout %s: the images have none", name)
		}
		p := filepath.Join(root, filepath.FromSlash(name))
		mode := h.FileInfo().Mode()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			os.Remove(p)
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			f.Close()
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			os.Remove(p)
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		case tar.TypeLink:
			os.Remove(p)
			if err := os.Link(filepath.Join(root, filepath.FromSlash(cleanName(h.Linkname))), p); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: member of type %q", name, h.Typeflag)
		}
		if os.Geteuid() == 0 {
			if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
				return err
			}
		}
		if h.Typeflag != tar.TypeSymlink {
			// After chown, which clears setuid bits.
			if err := os.Chmod(p, mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
				return err
			}
		}
	}
}

// chartImages renders the chart with its defaults and returns, for each
// image the chart runs from our registry, the commands its containers
// run.
func chartImages(t *testing.T) map[string][]string {
	t.Helper()
	paths, err := testenv.Paths()
	if err != nil {
		t.Fatal(err)
	}
	helm, err := paths.HelmBinary()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	// The chart's kubeVersion floor is above helm's default; 1.33.4 is what
	// envtest runs (deps/versions.env).
	cmd := exec.Command(helm, "template", "sh", "../helm/spikehunt", "--namespace", "spikehunt", "--kube-version", "1.33.4")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.Bytes())
	}
	images := map[string][]string{}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var obj struct {
			Spec struct {
				Template struct {
					Spec podSpec `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		}
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("helm template output: %v", err)
		}
		s := obj.Spec.Template.Spec
		for _, c := range append(s.InitContainers, s.Containers...) {
			if strings.HasPrefix(c.Image, "ghcr.io/spikehunt/") && len(c.Command) > 0 {
				images[c.Image] = append(images[c.Image], c.Command[0])
			}
		}
	}
	return images
}

type podSpec struct {
	Containers     []container `yaml:"containers"`
	InitContainers []container `yaml:"initContainers"`
}

type container struct {
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
}

// Each image is a valid OCI layout (every blob's digest and size checked
// by go-containerregistry) that containerd imports under exactly the name
// the chart renders by default, with the version, revision, source and
// created labels, the uid the chart runs it as, and, in its root
// filesystem, the executable the chart's command names.
func TestEachImageIsNamedAndLabelledAsTheChartRunsIt(t *testing.T) {
	chart := chartImages(t)
	if len(chart) != 3 {
		t.Errorf("the chart runs %d images of ghcr.io/spikehunt (%v), want 3", len(chart), chart)
	}
	users := map[string]string{"spikehunt": "65532:65532", "spikehunt-operator": "65532:65532", "spikehunt-agent": "0:0"}
	hexRE := regexp.MustCompile(`^[0-9a-f]{40}(-dirty)?$`)
	for _, repo := range repositories {
		t.Run(repo, func(t *testing.T) {
			b := loadBuilt(t, repo)
			if err := validate.Image(b.img); err != nil {
				t.Errorf("validate: %v", err)
			}
			commands, ok := chart[b.ref]
			if !ok {
				t.Errorf("the image is named %q; the chart runs %v", b.ref, keys(chart))
			}
			name, _, _ := strings.Cut(b.ref[strings.LastIndex(b.ref, "/")+1:], ":")
			if name != repo {
				t.Errorf("the archive %s.oci.tar holds %s", repo, b.ref)
			}
			c := b.config.Config
			for _, cmd := range commands {
				if len(c.Entrypoint) == 0 || cmd != c.Entrypoint[0] {
					t.Errorf("the chart runs %s in this image, whose entrypoint is %v", cmd, c.Entrypoint)
				}
			}
			if c.User != users[repo] {
				t.Errorf("user %q, want %q", c.User, users[repo])
			}
			tag := b.ref[strings.LastIndex(b.ref, ":")+1:]
			if c.Labels[LabelVersion] != tag || !hexRE.MatchString(c.Labels[LabelRevision]) || c.Labels[LabelSource] != "https://github.com/spikehunt/spikehunt" {
				t.Errorf("labels %v: want version %s, a commit as revision, the repository as source", c.Labels, tag)
			}
			if created, err := time.Parse(time.RFC3339, c.Labels[LabelCreated]); err != nil || !created.Equal(b.config.Created.Time) || created.Year() < 2020 {
				t.Errorf("created label %q, config created %v: want the commit's time in both", c.Labels[LabelCreated], b.config.Created)
			}
			if b.config.OS != "linux" || b.config.Architecture != "amd64" {
				t.Errorf("platform %s/%s", b.config.OS, b.config.Architecture)
			}
			for _, exe := range append(slices.Clone(c.Entrypoint[:1]), commands...) {
				fi, err := os.Stat(filepath.Join(b.root, exe))
				if err != nil || fi.Mode()&0o111 == 0 {
					t.Errorf("%s is not an executable of the image: %v", exe, err)
				}
			}
		})
	}
}

// chroot runs argv in root as uid:gid with env, in a mount namespace of
// its own that has /proc and the host's /dev and /sys, as a container
// has; the mounts go with the namespace.
func chroot(t *testing.T, root, user string, env []string, argv ...string) (string, error) {
	t.Helper()
	for _, d := range []string{"proc", "dev", "sys"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := `root=$1 user=$2; shift 2; mount -t proc proc "$root/proc" && mount --rbind /dev "$root/dev" && mount --rbind /sys "$root/sys" && exec chroot --userspec="$user" "$root" "$@"`
	args := append([]string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", root, user}, argv...)
	cmd := exec.Command("unshare", args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.RequirePrivileged(t, "root (chroot into the images)", errors.New("not root"))
	}
}

// The agent image runs the tools the capture backends exec, found on the
// image's PATH as the backends find them ("perf", "bpftrace"), and
// trace-cmd, and the agent itself: perf records with the perf backend's
// clock and reads the file back with the options it uses to count lost
// events, and bpftrace loads a program.
func TestTheAgentImageRunsPerfBpftraceAndTraceCmd(t *testing.T) {
	requireRoot(t)
	b := loadBuilt(t, "spikehunt-agent")
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"perf", "--version"}, "perf version 6.1"},
		{[]string{"perf", "record", "-a", "-e", "task-clock", "-k", "mono", "-o", "/tmp/perf.data", "--", "/bin/true"}, "Captured and wrote"},
		{[]string{"perf", "script", "-i", "/tmp/perf.data", "--show-lost-events", "-F", "cpu"}, ""},
		{[]string{"bpftrace", "--version"}, "bpftrace v0.17"},
		{[]string{"bpftrace", "-e", `BEGIN { printf("armed\n"); exit(); }`}, "armed"},
		// Loads libtraceevent's plugins; needs no tracefs.
		{[]string{"trace-cmd", "options"}, "plugin:"},
		{[]string{"/spikehunt-agent", "--help"}, "--capture"},
		{[]string{"/spikehunt-agent", "capture", "--help"}, "backends"},
	} {
		out, err := chroot(t, b.root, "0:0", b.config.Config.Env, tc.argv...)
		if err != nil {
			t.Errorf("%s: %v\n%s", strings.Join(tc.argv, " "), err, out)
			continue
		}
		if !strings.Contains(out, tc.want) {
			t.Errorf("%s printed %q, want %q in it", strings.Join(tc.argv, " "), out, tc.want)
		}
	}
	// perf is Debian's binary, not linux-base's wrapper script that would
	// look for a perf_<kernel version> the image does not have.
	perf, err := os.ReadFile(filepath.Join(b.root, "usr/bin/perf"))
	if err != nil || !bytes.HasPrefix(perf, []byte("\x7fELF")) {
		t.Errorf("usr/bin/perf is not an ELF binary (%v)", err)
	}
}

// The spikehunt image opens the embedded ClickHouse engine as the
// nonroot user, through SPIKEHUNT_LIBCHDB of its own config: a migration
// into a chdb:// directory succeeds, and the tables exist after it.
func TestTheSpikehuntImageRunsTheEmbeddedEngineAsNonroot(t *testing.T) {
	requireRoot(t)
	b := loadBuilt(t, "spikehunt")
	if !slices.Contains(b.config.Config.Env, "SPIKEHUNT_LIBCHDB="+LibCHDBPath) {
		t.Errorf("env %v lacks SPIKEHUNT_LIBCHDB=%s", b.config.Config.Env, LibCHDBPath)
	}
	env := b.config.Config.Env
	out, err := chroot(t, b.root, b.config.Config.User, env, "/spikehunt", "migrate", "--dsn", "chdb:///tmp/store")
	if err != nil {
		t.Fatalf("spikehunt migrate in the image: %v\n%s", err, out)
	}
	// The store has its tables and no rows: spikes says exactly that (and
	// exits 1, as on any empty store), which it can only know by opening
	// the store and reading its tables.
	out, err = chroot(t, b.root, b.config.Config.User, env, "/spikehunt", "spikes", "--dsn", "chdb:///tmp/store", "--since", "1h")
	if !strings.Contains(string(out), "is a spikehunt store with no rows in any table") {
		t.Errorf("spikehunt spikes after the migration: %v\n%s", err, out)
	}
	fi, err := os.Stat(filepath.Join(b.root, "tmp/store"))
	if err != nil {
		t.Fatalf("the store directory: %v", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != NonRoot {
		t.Errorf("the store directory is owned by %+v, want uid 65532: the image did not run as nonroot", fi.Sys())
	}
}

// The operator image starts as nonroot with its C library.
func TestTheOperatorImageStartsAsNonroot(t *testing.T) {
	requireRoot(t)
	b := loadBuilt(t, "spikehunt-operator")
	out, err := chroot(t, b.root, b.config.Config.User, b.config.Config.Env, "/spikehunt-operator", "--help")
	// The flag package exits 2 after printing the usage; a binary that
	// the loader could not start prints no usage.
	var exit *exec.ExitError
	if (err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 2)) || !strings.Contains(out, "-leader-elect") {
		t.Errorf("spikehunt-operator --help in the image: %v\n%s", err, out)
	}
}

func keys(m map[string][]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
