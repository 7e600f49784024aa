package export

import (
	"errors"
	"fmt"
	"time"

	"github.com/spikehunt/spikehunt/internal/defaults"
)

// Config configures the exporter.
type Config struct {
	// MaxSpans bounds the spans in one export request; MaxDelay bounds how
	// long a request waits to fill. Defaults 2000 and 200 ms: at 20,000
	// kept requests/s that is ten requests a second.
	MaxSpans int           `yaml:"max_spans"`
	MaxDelay time.Duration `yaml:"max_delay"`
}

// Defaults of Config.
const (
	DefaultMaxSpans = 2000
	DefaultMaxDelay = 200 * time.Millisecond
)

// WithDefaults returns c with its zero fields set to their defaults; c
// itself is not changed.
func (c Config) WithDefaults() Config {
	defaults.Fill(&c.MaxSpans, DefaultMaxSpans)
	defaults.Fill(&c.MaxDelay, DefaultMaxDelay)
	return c
}

// Validate checks c as New would run it, its zero fields taken as their
// defaults. It does not change c.
func (c Config) Validate() error {
	c = c.WithDefaults()
	if c.MaxSpans < 1 || c.MaxSpans > 100_000 {
		return fmt.Errorf("export: max_spans = %d, want 1–100000", c.MaxSpans)
	}
	if c.MaxDelay < time.Millisecond || c.MaxDelay > time.Minute {
		return errors.New("export: max_delay must be 1ms–1m")
	}
	return nil
}
