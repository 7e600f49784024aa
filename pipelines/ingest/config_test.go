package ingest

import (
	"strings"
	"testing"
	"time"
)

func TestConfigDefaultsAndBounds(t *testing.T) {
	c := Config{Brokers: []string{"k:9092"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.MaxRows != 300_000 || c.MaxBytes != 32<<20 || c.MaxDelay != time.Second || c.CatchUpDelay != 10*time.Second {
		t.Errorf("defaults: %d rows, %d bytes, %s, catch-up %s", c.MaxRows, c.MaxBytes, c.MaxDelay, c.CatchUpDelay)
	}
	// A long MaxDelay carries the catch-up delay with it.
	c = Config{Brokers: []string{"k:9092"}, MaxDelay: 30 * time.Second}
	if err := c.Validate(); err != nil || c.CatchUpDelay != 30*time.Second {
		t.Errorf("MaxDelay 30s: catch-up %s, %v; want 30s", c.CatchUpDelay, err)
	}
	c = Config{Brokers: []string{"k:9092"}, MaxDelay: 5 * time.Second, CatchUpDelay: time.Second}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "catch-up delay 1s below the max delay 5s") {
		t.Errorf("a catch-up delay below MaxDelay: %v", err)
	}
}
