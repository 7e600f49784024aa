package ingest

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestConfigDefaultsAndBounds(t *testing.T) {
	c := Config{Brokers: []string{"k:9092"}}.WithDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.MaxRows != 300_000 || c.MaxBytes != 32<<20 || c.MaxDelay != time.Second || c.CatchUpDelay != 10*time.Second {
		t.Errorf("defaults: %d rows, %d bytes, %s, catch-up %s", c.MaxRows, c.MaxBytes, c.MaxDelay, c.CatchUpDelay)
	}
	// A long MaxDelay carries the catch-up delay with it.
	c = Config{Brokers: []string{"k:9092"}, MaxDelay: 30 * time.Second}.WithDefaults()
	if err := c.Validate(); err != nil || c.CatchUpDelay != 30*time.Second {
		t.Errorf("MaxDelay 30s: catch-up %s, %v; want 30s", c.CatchUpDelay, err)
	}
	c = Config{Brokers: []string{"k:9092"}, MaxDelay: 5 * time.Second, CatchUpDelay: time.Second}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "catch-up delay 1s below the max delay 5s") {
		t.Errorf("a catch-up delay below MaxDelay: %v", err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"a window back past 98 days", Config{MaxAge: 99 * 24 * time.Hour}, "above 2352h0m0s"},
		{"the dead-letter topic read as a source", Config{DLQTopic: DefaultSpansTopic}, "also a source topic"},
		{"a rebalance timeout that leaves no lease", Config{SessionTimeout: 45 * time.Second, RebalanceTimeout: 10 * time.Second}, "leaves no lease"},
	} {
		c := tc.cfg
		c.Brokers = []string{"k:9092"}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	c = Config{Brokers: []string{"k:9092"}}.WithDefaults()
	if err := c.Validate(); err != nil || c.Lease() != 50*time.Second || c.MaxAhead != time.Hour {
		t.Errorf("defaults: lease %s, max ahead %s, %v; want 50s (60s − 2 × 4.5s − 1s), 1h", c.Lease(), c.MaxAhead, err)
	}
}

// Validate judges a config and changes nothing in it: defaults are
// WithDefaults' job, on a copy.
func TestValidateLeavesTheConfigAsItWas(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func() Config
	}{
		{"brokers only", func() Config { return Config{Brokers: []string{"k:9092"}} }},
		{"a long batch delay", func() Config { return Config{Brokers: []string{"k:9092"}, MaxDelay: 30 * time.Second} }},
		{"invalid: no brokers", func() Config { return Config{} }},
		{"invalid: a catch-up delay below the batch delay", func() Config {
			return Config{Brokers: []string{"k:9092"}, MaxDelay: 5 * time.Second, CatchUpDelay: time.Second}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.make()
			_ = c.Validate()
			if diff := cmp.Diff(tc.make(), c, cmpopts.IgnoreFields(Config{}, "Now")); diff != "" || c.Now != nil {
				t.Errorf("Validate changed the config (-before +after):\n%s", diff)
			}
			if d := c.WithDefaults(); d.Now == nil || d.Group != DefaultGroup || c.Group != "" {
				t.Errorf("WithDefaults: group %q, now set %v; the receiver's group %q", d.Group, d.Now != nil, c.Group)
			}
		})
	}
}
