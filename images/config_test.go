package images

import (
	"strings"
	"testing"
	"time"
)

func validConfig() Config {
	c := DefaultConfig()
	c.LibCHDB = "/x/libchdb.so"
	c.Tag = "0.1.0"
	c.Revision = "0123456789abcdef0123456789abcdef01234567"
	c.Created = time.Unix(1_800_000_000, 0)
	c.Debian.Agent = []string{"linux-perf=6.1.192-2", "bpftrace=0.17.0-1"}
	c.Debian.Runtime = []string{"libc6=2.36-9+deb12u14", "ca-certificates=20250419~deb12u2"}
	c.Debian.Epoch = time.Unix(1_735_689_600, 0)
	return c
}

// Validate names what is wrong and how to fix it, and leaves the config
// as it was.
func TestValidateRefusesUnpinnedPackagesAndUnnamedImages(t *testing.T) {
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("the valid config: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"an unpinned package", func(c *Config) { c.Debian.Agent = append(c.Debian.Agent, "trace-cmd") }, `"trace-cmd" is not name=version`},
		{"no runtime packages", func(c *Config) { c.Debian.Runtime = nil }, "IMAGES_RUNTIME_PACKAGES is empty"},
		{"a tag with a slash", func(c *Config) { c.Tag = "v1/2" }, "not a valid tag"},
		{"a registry with a scheme", func(c *Config) { c.Registry = "https://ghcr.io/x" }, "not host[:port][/path]"},
		{"no created time", func(c *Config) { c.Created = time.Time{} }, "SOURCE_DATE_EPOCH"},
		{"no pinned epoch", func(c *Config) { c.Debian.Epoch = time.Time{} }, "IMAGES_PINNED_EPOCH"},
		{"no revision", func(c *Config) { c.Revision = "" }, "revision is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.change(&c)
			before := strings.Join(c.Debian.Agent, " ")
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want %q in it", err, tc.want)
			}
			if strings.Join(c.Debian.Agent, " ") != before {
				t.Errorf("Validate changed the config")
			}
		})
	}
	if got := validConfig().Ref("spikehunt-agent"); got != "ghcr.io/spikehunt/spikehunt-agent:0.1.0" {
		t.Errorf("Ref = %q", got)
	}
}
