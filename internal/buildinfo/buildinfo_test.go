package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestDescribeNamesTheBuild(t *testing.T) {
	vcs := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"go install at a tag", debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0"},
		{"go build in a checkout", debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: vcs("vcs.revision", "37068b1a9c0d2e3f4a5b6c7d8e9f00112233445", "vcs.time", "2026-11-29T16:25:00Z", "vcs.modified", "true")},
			"dev (commit 37068b1a9c0d, 2026-11-29T16:25:00Z, modified)"},
		{"a clean checkout", debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: vcs("vcs.revision", "37068b1", "vcs.modified", "false")}, "dev (commit 37068b1)"},
		{"a pseudo-version is not a release", debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261129162500-37068b1a9c0d"},
			Settings: vcs("vcs.revision", "37068b1a9c0d")}, "dev (commit 37068b1a9c0d)"},
		{"nothing recorded", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
	} {
		if got := describe(&tc.bi); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := Describe("1.2.0"); got != "1.2.0" {
		t.Errorf("a stamped version: %q, want it as stamped", got)
	}
}
