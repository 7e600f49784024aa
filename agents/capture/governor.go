package capture

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// Heat is what the governor knows of the host, from the agent's own
// sampling passes: how busy each CPU was and how much of the time tasks
// stalled on memory in the last interval. It is fed the same points the
// exporter ships, so it costs no extra reads of /proc.
type Heat struct {
	mu       sync.Mutex
	busy     map[int]float64 // CPU → fraction of the interval not idle
	acc      map[int]cpuAcc
	memStall float64 // fraction of the last interval with some task stalled on memory
	at       time.Time
}

type cpuAcc struct{ busy, total float64 }

// NewHeat returns an empty Heat; until the first pass it knows nothing and
// Coolest returns nil.
func NewHeat() *Heat { return &Heat{busy: map[int]float64{}, acc: map[int]cpuAcc{}} }

// Observe takes one sampling pass.
func (h *Heat) Observe(pts []telemetry.Point) {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.acc)
	sawCPU := false
	for i := range pts {
		p := &pts[i]
		switch p.Metric {
		case "system.cpu.time":
			cpu, mode := -1, ""
			for _, a := range p.Attrs {
				switch a.Key {
				case "cpu.logical_number":
					if v, ok := a.Value.(int64); ok {
						cpu = int(v)
					}
				case "cpu.mode":
					mode, _ = a.Value.(string)
				}
			}
			if cpu < 0 {
				continue
			}
			sawCPU = true
			c := h.acc[cpu]
			c.total += p.Value
			if mode != "idle" && mode != "iowait" {
				c.busy += p.Value
			}
			h.acc[cpu] = c
		case "spikehunt.pressure.stall_time":
			var res, kind string
			for _, a := range p.Attrs {
				switch a.Key {
				case "spikehunt.pressure.resource":
					res, _ = a.Value.(string)
				case "spikehunt.pressure.kind":
					kind, _ = a.Value.(string)
				}
			}
			if res == "memory" && kind == "some" {
				if d := p.End.Sub(p.Start).Seconds(); d > 0 {
					h.memStall = p.Value / d
					h.at = p.End
				}
			}
		}
	}
	if sawCPU {
		clear(h.busy)
		for cpu, c := range h.acc {
			if c.total > 0 {
				h.busy[cpu] = c.busy / c.total
			}
		}
	}
}

// Coolest returns the least busy half of the CPUs (at least one), in
// ascending CPU order, or nil before the first pass.
func (h *Heat) Coolest() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.busy) == 0 {
		return nil
	}
	cpus := make([]int, 0, len(h.busy))
	for c := range h.busy {
		cpus = append(cpus, c)
	}
	sort.Slice(cpus, func(i, j int) bool {
		if h.busy[cpus[i]] != h.busy[cpus[j]] {
			return h.busy[cpus[i]] < h.busy[cpus[j]]
		}
		return cpus[i] < cpus[j]
	})
	out := cpus[:max(1, len(cpus)/2)]
	sort.Ints(out)
	return out
}

// MemoryStall is the share of the last interval some task stalled on
// memory (PSI "some"), and when it was measured.
func (h *Heat) MemoryStall() (float64, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.memStall, h.at
}

// GovernConfig bounds what a recorder may cost the host.
type GovernConfig struct {
	// CPUs pins recorders here; empty lets the governor pick the coolest
	// half of the CPUs from Heat at arm time.
	CPUs []int
	// Nice is the recorders' nice level (0–19).
	Nice int
	// IOClass is "idle", "best-effort" or "" (leave it).
	IOClass string
}

// gentler returns c with req's nice and IO class wherever they are
// gentler on the host: the higher nice, idle over best-effort over leaving
// the class as it is. A request can soften the agent's governance, never
// loosen it. The CPUs stay c's (Spec.CPUs is a request's pinning).
func (c GovernConfig) gentler(req GovernConfig) GovernConfig {
	c.Nice = max(c.Nice, req.Nice)
	rank := map[string]int{"": 0, "best-effort": 1, "idle": 2}
	if rank[req.IOClass] > rank[c.IOClass] {
		c.IOClass = req.IOClass
	}
	return c
}

// Validate checks the bounds.
func (c GovernConfig) Validate() error {
	if c.Nice < 0 || c.Nice > 19 {
		return fmt.Errorf("%w: nice %d is outside [0, 19]", ErrInvalid, c.Nice)
	}
	switch c.IOClass {
	case "", "idle", "best-effort":
	default:
		return fmt.Errorf("%w: io class %q (idle or best-effort)", ErrInvalid, c.IOClass)
	}
	for _, cpu := range c.CPUs {
		if cpu < 0 || cpu >= MaxCPUList {
			return fmt.Errorf("%w: CPU %d", ErrInvalid, cpu)
		}
	}
	return nil
}
