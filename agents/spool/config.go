package spool

import (
	"errors"
	"fmt"
	"time"

	"github.com/spikehunt/spikehunt/internal/defaults"
)

// Config sizes the spool and sets how often it reaches the disk. Start from
// DefaultConfig: the zero FsyncInterval means "fsync every Append", so a
// zero Config is durable but slow.
type Config struct {
	// Dir holds the segment files, the ack file and a lock file. Give each
	// spool its own directory on a persistent volume (a hostPath for the
	// DaemonSet): a spool on tmpfs or in the container's writable layer
	// does not survive a reboot or a pod replacement.
	Dir string `yaml:"dir"`

	// MaxBytes caps the total size of the segment files, 2×SegmentBytes–1
	// TiB; default 256 MiB. When an Append would pass it, the oldest
	// segment is dropped, acknowledged or not, and its unacknowledged
	// records are counted. Keep it below the volume's free space: a full
	// disk makes Append fail instead of dropping the oldest records.
	MaxBytes int64 `yaml:"max_bytes"`

	// SegmentBytes is the size at which a new segment file starts, 4 KiB–256
	// MiB; default 8 MiB. The cap drops and Ack frees whole segments, so
	// this is the grain at which space comes back. A record (9-byte header
	// plus payload) must fit in one segment.
	SegmentBytes int64 `yaml:"segment_bytes"`

	// FsyncInterval is how often appended records and the ack point are
	// fsynced, 0–1 min; DefaultConfig sets 1 s. It bounds what a machine
	// crash or power loss can lose: the records appended (and the acks
	// made) in the last FsyncInterval. A killed process loses nothing
	// that Append returned. 0 fsyncs on every Append and every Ack: use it
	// only at low rates, each call then waits for the disk.
	FsyncInterval time.Duration `yaml:"fsync_interval"`
}

// Defaults, exported so the agent's flags and the Helm chart document the
// same values.
const (
	DefaultMaxBytes      = 256 << 20
	DefaultSegmentBytes  = 8 << 20
	DefaultFsyncInterval = time.Second

	minSegmentBytes  = 4 << 10
	maxSegmentBytes  = 256 << 20 // record offsets are kept as uint32
	maxMaxBytes      = 1 << 40
	maxFsyncInterval = time.Minute
	maxSegments      = 1 << 16 // MaxBytes / SegmentBytes: files in Dir, and the spool scans its segment list
)

// DefaultConfig returns the defaults; set Dir before Open.
func DefaultConfig() Config {
	return Config{
		MaxBytes:      DefaultMaxBytes,
		SegmentBytes:  DefaultSegmentBytes,
		FsyncInterval: DefaultFsyncInterval,
	}
}

// WithDefaults returns c with zero sizes set to their defaults; c itself
// is not changed. It leaves a zero FsyncInterval alone: 0 means fsync
// every Append.
func (c Config) WithDefaults() Config {
	defaults.Fill(&c.SegmentBytes, DefaultSegmentBytes)
	defaults.Fill(&c.MaxBytes, DefaultMaxBytes)
	return c
}

// Validate checks c as Open would run it, its zero sizes taken as their
// defaults. It does not change c.
func (c Config) Validate() error {
	if c.Dir == "" {
		return errors.New("spool: Config.Dir is empty: set it to a directory on a persistent volume")
	}
	c = c.WithDefaults()
	if c.SegmentBytes < minSegmentBytes || c.SegmentBytes > maxSegmentBytes {
		return fmt.Errorf("spool: SegmentBytes = %d, want %d–%d", c.SegmentBytes, minSegmentBytes, maxSegmentBytes)
	}
	if c.MaxBytes < 2*c.SegmentBytes || c.MaxBytes > maxMaxBytes {
		return fmt.Errorf("spool: MaxBytes = %d, want 2×SegmentBytes (%d)–%d: the cap drops whole segments and keeps the one being written",
			c.MaxBytes, 2*c.SegmentBytes, int64(maxMaxBytes))
	}
	if c.MaxBytes/c.SegmentBytes > maxSegments {
		return fmt.Errorf("spool: MaxBytes / SegmentBytes = %d segments, want at most %d: raise SegmentBytes", c.MaxBytes/c.SegmentBytes, maxSegments)
	}
	if c.FsyncInterval < 0 || c.FsyncInterval > maxFsyncInterval {
		return fmt.Errorf("spool: FsyncInterval = %v, want 0 (every Append)–%v", c.FsyncInterval, maxFsyncInterval)
	}
	return nil
}
