package export

import (
	"errors"
	"fmt"
	"time"
)

// Config configures the exporter.
type Config struct {
	// MaxSpans bounds the spans in one export request; MaxDelay bounds how
	// long a request waits to fill. Defaults 2000 and 200 ms: at 20,000
	// kept requests/s that is ten requests a second.
	MaxSpans int           `yaml:"max_spans"`
	MaxDelay time.Duration `yaml:"max_delay"`
}

// Validate fills defaults and checks bounds.
func (c *Config) Validate() error {
	if c.MaxSpans == 0 {
		c.MaxSpans = 2000
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = 200 * time.Millisecond
	}
	if c.MaxSpans < 1 || c.MaxSpans > 100_000 {
		return fmt.Errorf("export: max_spans = %d, want 1–100000", c.MaxSpans)
	}
	if c.MaxDelay < time.Millisecond || c.MaxDelay > time.Minute {
		return errors.New("export: max_delay must be 1ms–1m")
	}
	return nil
}
