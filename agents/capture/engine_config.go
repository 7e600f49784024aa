package capture

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/defaults"
)

// EngineConfig configures the host's capture engine.
type EngineConfig struct {
	// Dir is the volume captures are written to (work/<id> while a
	// capture runs). Put it on a disk the host's workload does not need.
	Dir string
	// Resource names the host in every artifact.
	Resource HostIdentity
	// Backends are the recorders this host may arm, constructed by the
	// caller (capture/perf, capture/ftrace, ...): the engine imports no
	// backend.
	Backends []Backend
	Govern   GovernConfig
	// Store keeps sealed artifacts; nil leaves them in Dir/work/<id>.
	Store artifact.Store
	// MaxConcurrent is how many captures may run at once on this host.
	MaxConcurrent int
	// MaxRingKB caps a request's ring size per CPU.
	MaxRingKB int
	// MemoryStallAbort aborts every running capture when tasks stalled
	// on memory (PSI some) for more than this share of a sampling
	// interval while the host is short of memory (MemoryShortBelow). 1
	// turns it off.
	MemoryStallAbort float64
	// MemoryShortBelow: the host is short of memory when MemAvailable is
	// below this share of MemTotal. A workload at its own cgroup's limit
	// stalls on memory (the kernel's PSI counts it) on a host with plenty
	// left, and is what a capture is for: only a host short of memory
	// aborts. Default 0.1.
	MemoryShortBelow float64
	// MemAvailable reads the host's available share of memory; nil reads
	// /proc/meminfo.
	MemAvailable func() (float64, error)
	// RequestRing is how many recent requests are kept, while a capture
	// is armed, to write the window's requests beside the trace.
	RequestRing int
	// FireEvery and FireBurst rate-limit the local trigger per sender
	// (telemetry.SenderKey: a uid on the unix socket, an address
	// otherwise): a sender may fire FireBurst times at once and once more
	// every FireEvery (defaults 30s and 2). Every capture one request
	// fires counts as one fire, so that a perf and a bpftrace capture
	// armed for the same service both take the same spike. Manual and
	// remote fires are not limited: the control socket is root's and the
	// operator keeps its own budgets.
	FireEvery time.Duration
	FireBurst int
	// MinFreeBytes refuses to arm when Dir has less free space.
	MinFreeBytes int64
	ArmTimeout   time.Duration
	// CollectTimeout bounds a recorder's final dump and stop, and each
	// attempt to put the sealed artifact in the Store.
	CollectTimeout time.Duration
	// StoreRetryFor is how long a sealed capture waits for a Store that
	// refuses it (S3 down, credentials expired) before it fails; the
	// sealed folder stays on disk either way. Attempts back off from 1 s
	// to 30 s.
	StoreRetryFor time.Duration
	// AnalyzeTimeout bounds a recorder's analysis of its trace (Analyzer);
	// past it the capture is sealed without one, and says so. Negative:
	// no analysis.
	AnalyzeTimeout time.Duration
	Log            *slog.Logger
	Now            func() time.Time
}

// HostIdentity is what names the host in an artifact.
type HostIdentity struct {
	Host, Node, HWClass string
}

// Defaults of the per-sender fire rate.
const (
	DefaultFireEvery = 30 * time.Second
	DefaultFireBurst = 2
)

func (c EngineConfig) withDefaults() EngineConfig {
	defaults.Fill(&c.MaxConcurrent, 2)
	defaults.Fill(&c.MaxRingKB, 64<<10)
	defaults.Fill(&c.MemoryStallAbort, 0.2)
	defaults.Fill(&c.MemoryShortBelow, 0.1)
	if c.MemAvailable == nil {
		c.MemAvailable = procMemAvailable
	}
	defaults.Fill(&c.RequestRing, 1<<16)
	defaults.Fill(&c.FireEvery, DefaultFireEvery)
	defaults.Fill(&c.FireBurst, DefaultFireBurst)
	defaults.Fill(&c.MinFreeBytes, 256<<20)
	defaults.Fill(&c.ArmTimeout, 10*time.Second)
	defaults.Fill(&c.CollectTimeout, 30*time.Second)
	defaults.Fill(&c.StoreRetryFor, 15*time.Minute)
	defaults.Fill(&c.AnalyzeTimeout, 60*time.Second)
	defaults.Fill(&c.Log, slog.New(slog.DiscardHandler))
	if c.Now == nil { // a func is not comparable: Fill cannot take it
		c.Now = time.Now
	}
	return c
}

// Validate checks the bounds.
func (c EngineConfig) Validate() error {
	if c.Dir == "" {
		return fmt.Errorf("%w: capture dir is empty", ErrInvalid)
	}
	if c.MaxConcurrent < 1 || c.MaxConcurrent > 64 {
		return fmt.Errorf("%w: max concurrent captures %d is outside [1, 64]", ErrInvalid, c.MaxConcurrent)
	}
	if c.MaxRingKB < MinRingKB || c.MaxRingKB > MaxRingKB {
		return fmt.Errorf("%w: ring cap %d KiB is outside [%d, %d]", ErrInvalid, c.MaxRingKB, MinRingKB, MaxRingKB)
	}
	if c.MemoryShortBelow <= 0 || c.MemoryShortBelow > 1 {
		return fmt.Errorf("%w: memory short below %v is outside (0, 1]", ErrInvalid, c.MemoryShortBelow)
	}
	if c.MemoryStallAbort <= 0 || c.MemoryStallAbort > 1 {
		return fmt.Errorf("%w: memory stall abort %v is outside (0, 1]", ErrInvalid, c.MemoryStallAbort)
	}
	if c.RequestRing < 1 || c.RequestRing > 1<<24 {
		return fmt.Errorf("%w: request ring %d is outside [1, %d]", ErrInvalid, c.RequestRing, 1<<24)
	}
	if c.FireEvery < time.Second || c.FireEvery > 24*time.Hour {
		return fmt.Errorf("%w: fire interval %v is outside [1s, 24h]", ErrInvalid, c.FireEvery)
	}
	if c.FireBurst < 1 || c.FireBurst > 64 {
		return fmt.Errorf("%w: fire burst %d is outside [1, 64]", ErrInvalid, c.FireBurst)
	}
	if len(c.Backends) == 0 {
		return fmt.Errorf("%w: no capture backend enabled", ErrInvalid)
	}
	return c.Govern.Validate()
}
