package spool

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestConfigValidate(t *testing.T) {
	defaults := DefaultConfig()
	defaults.Dir = "/var/lib/spikehunt/spool"
	with := func(f func(*Config)) Config { c := defaults; f(&c); return c }
	tests := []struct {
		name    string
		in      Config
		want    Config
		wantErr string
	}{
		{name: "the defaults are valid", in: defaults, want: defaults},
		{name: "zero sizes get the defaults and a zero interval stays: fsync every append",
			in:   Config{Dir: defaults.Dir},
			want: with(func(c *Config) { c.FsyncInterval = 0 })},
		{name: "small segments and a tight cap are kept",
			in:   with(func(c *Config) { c.SegmentBytes, c.MaxBytes = 4<<10, 8<<10 }),
			want: with(func(c *Config) { c.SegmentBytes, c.MaxBytes = 4<<10, 8<<10 })},
		{name: "no directory", in: with(func(c *Config) { c.Dir = "" }), wantErr: "Config.Dir is empty"},
		{name: "segments smaller than 4 KiB", in: with(func(c *Config) { c.SegmentBytes = 1000 }), wantErr: "SegmentBytes = 1000"},
		{name: "segments larger than 256 MiB", in: with(func(c *Config) { c.SegmentBytes = 1 << 30; c.MaxBytes = 4 << 30 }), wantErr: "SegmentBytes = 1073741824"},
		{name: "a cap below two segments", in: with(func(c *Config) { c.MaxBytes = 12 << 20 }), wantErr: "MaxBytes = 12582912, want 2×SegmentBytes"},
		{name: "a cap beyond 1 TiB", in: with(func(c *Config) { c.MaxBytes = 2 << 40 }), wantErr: "MaxBytes"},
		{name: "more than 65536 segments", in: with(func(c *Config) { c.SegmentBytes, c.MaxBytes = 4<<10, 1<<30 }), wantErr: "262144 segments"},
		{name: "a negative fsync interval", in: with(func(c *Config) { c.FsyncInterval = -time.Second }), wantErr: "FsyncInterval = -1s"},
		{name: "an fsync interval over a minute", in: with(func(c *Config) { c.FsyncInterval = time.Hour }), wantErr: "FsyncInterval = 1h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in.WithDefaults()
			err := got.Validate()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Validate() = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Validate() (-want +got):\n%s", diff)
			}
		})
	}
}

// Validate judges a config and changes nothing in it: defaults are
// WithDefaults' job, on a copy.
func TestValidateLeavesTheConfigAsItWas(t *testing.T) {
	for _, in := range []Config{
		{Dir: "/var/lib/spikehunt/spool"},
		{Dir: "/d", SegmentBytes: 1000},
		{},
		{Dir: "/d", MaxBytes: 12 << 20},
	} {
		got := in
		_ = got.Validate()
		if diff := cmp.Diff(in, got); diff != "" {
			t.Errorf("Validate changed %+v (-before +after):\n%s", in, diff)
		}
	}
	if c := (Config{Dir: "/d"}).WithDefaults(); c.SegmentBytes != DefaultSegmentBytes || c.MaxBytes != DefaultMaxBytes || c.FsyncInterval != 0 {
		t.Errorf("WithDefaults = %+v, want the default sizes and a zero fsync interval", c)
	}
}
