package chhttp

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spikehunt/spikehunt/internal/defaults"
)

// Config configures Handler.
type Config struct {
	// User and Password: the read-write user (the ingest's). With User or
	// ReadOnlyUser set, every request must name one of them; with neither,
	// every request is the read-write user (safe only on a loopback
	// address, which is why serve-clickhouse refuses any other without one).
	User, Password string
	// ReadOnlyUser and ReadOnlyPassword: a user that may only read (for
	// Grafana). Its statements must be SELECT, WITH, SHOW, DESCRIBE, EXISTS
	// or EXPLAIN, and run with the engine's readonly = 2, so no INSERT, DDL
	// or change of readonly gets through, whatever the text hides.
	ReadOnlyUser, ReadOnlyPassword string
	// MigrateUser and MigratePassword: the one user that may change the
	// schema (CREATE, ALTER, DROP, …), for spikehunt migrate. Without it,
	// no request changes the schema.
	MigrateUser, MigratePassword string
	// ExternalSources lets statements read and write files as the server's
	// user through what the engine's grants cannot refuse: FROM INFILE, the
	// file() function, and (for the read-write user) INTO OUTFILE. Set it
	// with store.EmbeddedConfig.ExternalSources, which opens the rest.
	ExternalSources bool
	// MaxQueryBytes bounds the query text read from the body. Default 1 MiB.
	MaxQueryBytes int64
	// MaxCompressedBlockBytes bounds one of ClickHouse's compressed blocks
	// in a decompress=1 body, compressed and decompressed, and the window
	// of a zstd request body: what a block declares is checked against it
	// before anything is allocated for it, so a small body cannot make the
	// server allocate more. Most clients write blocks of 1 MiB (the
	// engine's max_compress_block_size); clickhouse-go over HTTP sends a
	// whole batch as one block. Default 16 MiB; 64 KiB to 1 GiB.
	MaxCompressedBlockBytes int64
	// MaxExecutionTime bounds every statement (the engine's
	// max_execution_time): a client's larger value, or none, becomes this.
	// It is also what a server should allow for writing a response.
	// Default 5 min; at least 1 s.
	MaxExecutionTime time.Duration
	Logger           *slog.Logger
}

// DefaultConfig is the configuration New completes a zero Config from.
func DefaultConfig() Config {
	return Config{MaxQueryBytes: 1 << 20, MaxCompressedBlockBytes: 16 << 20, MaxExecutionTime: 5 * time.Minute}
}

// Validate checks cfg without changing it.
func (c Config) Validate() error {
	if c.ReadOnlyUser != "" && c.ReadOnlyUser == c.User {
		return fmt.Errorf("chhttp: the read-only user %q is also the read-write user: give Grafana a user of its own", c.User)
	}
	if c.MigrateUser != "" && (c.MigrateUser == c.User || c.MigrateUser == c.ReadOnlyUser) {
		return fmt.Errorf("chhttp: the migrate user %q is also another role's user: give each role a user of its own", c.MigrateUser)
	}
	if c.MaxQueryBytes < 0 {
		return errors.New("chhttp: MaxQueryBytes must not be negative")
	}
	if c.MaxCompressedBlockBytes != 0 && (c.MaxCompressedBlockBytes < 64<<10 || c.MaxCompressedBlockBytes > 1<<30) {
		return fmt.Errorf("chhttp: MaxCompressedBlockBytes = %d, want 64 KiB to 1 GiB (clients write 1 MiB blocks; the engine refuses blocks over 1 GiB)", c.MaxCompressedBlockBytes)
	}
	if c.MaxExecutionTime != 0 && c.MaxExecutionTime < time.Second {
		return fmt.Errorf("chhttp: MaxExecutionTime = %v, want at least 1s (the engine counts whole seconds)", c.MaxExecutionTime)
	}
	return nil
}

// AuthRequired reports whether requests must name a user.
func (c Config) AuthRequired() bool {
	return c.User != "" || c.ReadOnlyUser != "" || c.MigrateUser != ""
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	defaults.Fill(&c.MaxQueryBytes, d.MaxQueryBytes)
	defaults.Fill(&c.MaxCompressedBlockBytes, d.MaxCompressedBlockBytes)
	defaults.Fill(&c.MaxExecutionTime, d.MaxExecutionTime)
	defaults.Fill(&c.Logger, slog.Default())
	return c
}
