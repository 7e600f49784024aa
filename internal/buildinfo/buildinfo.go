// Package buildinfo says which build of spikehunt is running, for the
// version commands of the three binaries: the release version the image
// build stamps (-ldflags "-X main.version=…"), else the module version a
// `go install …@v1.2.3` records, else the commit a `go build` in a
// checkout records, so that a bug report from a hand-built binary still
// names its source. A leaf: standard library only.
package buildinfo

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// Describe is stamped (main.version) when it is set and not "dev", else
// what the Go toolchain recorded in the binary: "dev (commit 1a2b3c4d5e6f,
// 2026-11-29T17:00:00Z, modified)", or "dev" when nothing was recorded
// (a test binary).
func Describe(stamped string) string {
	if stamped != "" && stamped != "dev" {
		return stamped
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	return describe(bi)
}

func describe(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" && !strings.HasPrefix(v, "v0.0.0-") {
		return v
	}
	var rev, at string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	parts := []string{"commit " + rev}
	if at != "" {
		parts = append(parts, at)
	}
	if modified {
		parts = append(parts, "modified")
	}
	return fmt.Sprintf("dev (%s)", strings.Join(parts, ", "))
}
