package images

import (
	"archive/tar"
	"path/filepath"
	"strings"
)

// Definition is one image: its layers, bottom first, and its config.
type Definition struct {
	// Repository is the image's name under the registry, as the chart's
	// <component>.image.repository has it.
	Repository  string
	Description string
	Layers      []LayerSpec
	// Entrypoint is the chart's command for the image's containers.
	Entrypoint []string
	// User is "uid:gid": 65532 (nonroot) for what the chart runs under the
	// restricted Pod Security Standard, 0 for the agent.
	User string
	Env  []string
}

// NonRoot is the uid and gid of the spikehunt and operator images, which
// the chart's restricted pods run as (runAsUser 65532).
const NonRoot = 65532

// LibCHDBPath is where the spikehunt image carries the ClickHouse engine;
// SPIKEHUNT_LIBCHDB points there (internal/store.LibraryCandidates).
const LibCHDBPath = "/usr/local/lib/libchdb.so"

const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// runtimeRootfs is the C library of the spikehunt and operator images:
// both binaries are dynamically linked to glibc (purego's dlopen, which
// loads libchdb.so, needs libc and libdl; libchdb.so itself needs libc,
// libm, libdl, librt and libpthread and nothing else), and the CA bundle.
func runtimeRootfs(deb DebianConfig) rootfsSpec {
	return rootfsSpec{
		name:    "runtime",
		variant: "extract",
		pins:    deb.Runtime,
		// update-ca-certificates does this in ca-certificates' postinst,
		// which an extracted package does not run; byte order (LC_ALL=C.UTF-8).
		hooks: []string{`cat "$1"/usr/share/ca-certificates/mozilla/*.crt >"$1/etc/ssl/certs/ca-certificates.crt"`},
	}
}

// agentRootfs is Debian's essential set (dpkg, a shell for `kubectl exec`
// and `perf report` by hand, the dpkg database that scanners read) with
// perf, bpftrace and trace-cmd.
func agentRootfs(deb DebianConfig) rootfsSpec {
	return rootfsSpec{name: "agent", variant: "essential", pins: deb.Agent, dpkgOpts: docsExcluded}
}

// keepRuntime keeps from the runtime rootfs the C library, the loader's
// configuration, the CA bundle and the copyright files of what is kept;
// the extracted dependencies of ca-certificates (openssl, debconf, perl)
// stay out.
func keepRuntime(name string) bool {
	for _, p := range []string{"lib", "lib64", "etc/ld.so.conf.d"} {
		if name == p || strings.HasPrefix(name, p+"/") {
			return true
		}
	}
	if name == "etc/ssl/certs/ca-certificates.crt" {
		return true
	}
	// libgcc-s1's doc folder is a symlink to gcc-12-base's.
	for _, pkg := range []string{"libc6", "libgcc-s1", "gcc-12-base", "ca-certificates"} {
		d := "usr/share/doc/" + pkg
		if name == d || name == d+"/copyright" {
			return true
		}
	}
	return false
}

// keepAgent drops the device nodes and links under /dev: the runtime
// mounts its own /dev.
func keepAgent(name string) bool { return !strings.HasPrefix(name, "dev/") }

// Definitions are the three images of `make images`. runtimeTar and
// agentTar are the Debian root filesystems (rootfs).
func Definitions(cfg Config, runtimeTar, agentTar string) []Definition {
	epoch := cfg.Debian.Epoch
	runtime := LayerSpec{
		CreatedBy: "Debian " + cfg.Debian.Suite + ": " + strings.Join(cfg.Debian.Runtime, " ") + " (glibc, CA certificates); nonroot 65532",
		ModTime:   epoch,
		FromTar:   runtimeTar,
		Keep:      keepRuntime,
		KeepID:    "runtime/1",
		Entries: []Entry{
			{Path: "etc/passwd", Type: tar.TypeReg, Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
			{Path: "etc/group", Type: tar.TypeReg, Mode: 0o644, Data: []byte("root:x:0:\nnonroot:x:65532:\n")},
			{Path: "root", Type: tar.TypeDir, Mode: 0o700},
			{Path: "home/nonroot", Type: tar.TypeDir, Mode: 0o700, UID: NonRoot, GID: NonRoot},
			{Path: "tmp", Type: tar.TypeDir, Mode: 0o1777},
		},
	}
	binary := func(name, dest string) LayerSpec {
		return LayerSpec{
			CreatedBy: name + " (go build -trimpath, linux/amd64)",
			ModTime:   cfg.Created,
			Entries:   []Entry{{Path: dest, Type: tar.TypeReg, Mode: 0o755, Source: filepath.Join(cfg.BinDir, name)}},
		}
	}
	return []Definition{
		{
			Repository:  "spikehunt",
			Description: "spikehunt ingest, detect, migrate, serve-clickhouse and the CLI, with the embedded ClickHouse engine (libchdb.so)",
			Layers: []LayerSpec{
				runtime,
				{
					CreatedBy: "libchdb.so (the embedded ClickHouse engine, deps/versions.env CHDB_VERSION)",
					ModTime:   epoch,
					Entries:   []Entry{{Path: strings.TrimPrefix(LibCHDBPath, "/"), Type: tar.TypeReg, Mode: 0o755, Source: cfg.LibCHDB}},
				},
				binary("spikehunt", "spikehunt"),
			},
			Entrypoint: []string{"/spikehunt"},
			User:       "65532:65532",
			Env:        []string{defaultPath, "SPIKEHUNT_LIBCHDB=" + LibCHDBPath},
		},
		{
			Repository:  "spikehunt-agent",
			Description: "the spikehunt node agent with perf, bpftrace and trace-cmd",
			Layers: []LayerSpec{
				{
					CreatedBy: "Debian " + cfg.Debian.Suite + " essential set: " + strings.Join(cfg.Debian.Agent, " "),
					ModTime:   epoch,
					FromTar:   agentTar,
					Keep:      keepAgent,
					KeepID:    "agent/1",
				},
				binary("spikehunt-agent", "spikehunt-agent"),
			},
			Entrypoint: []string{"/spikehunt-agent"},
			// The chart runs the agent as root with only its backends'
			// capabilities (agent-daemonset.yaml).
			User: "0:0",
			Env:  []string{defaultPath},
		},
		{
			Repository:  "spikehunt-operator",
			Description: "the spikehunt operator (CapturePolicy, Capture)",
			Layers:      []LayerSpec{runtime, binary("spikehunt-operator", "spikehunt-operator")},
			Entrypoint:  []string{"/spikehunt-operator"},
			User:        "65532:65532",
			Env:         []string{defaultPath},
		},
	}
}
