package intake

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Overflow is the service and endpoint name that requests beyond the
// cardinality caps are filed under.
const Overflow = "_overflow"

// A name arrives as a string (OTLP, decoded by pdata) or as bytes of a
// datagram (line protocol). Map lookups with string(b) do not allocate, so
// a known name costs no garbage whichever way it came.
type name interface{ ~string | ~[]byte }

// serviceState is what the intake keeps per service: its endpoints and its
// rolling tail. mu guards everything but lastSeen.
type serviceState struct {
	name      string
	threshold time.Duration // fixed slow threshold; 0 = none
	lastSeen  atomic.Int64  // unix ns

	mu        sync.Mutex
	endpoints map[string]*endpointSlot
	sweptAt   int64
	tail      *tailEstimate
	rate      sampleRate
}

type endpointSlot struct {
	name     string
	lastSeen int64
}

// cardinality caps the distinct services and endpoints per service. The
// sets only grow until a cap is hit; then, at most once a second, names
// idle for longer than idle are swept to make room. A name that stays busy
// keeps its slot, so a newcomer beyond the cap lands in _overflow until
// something goes quiet.
type cardinality struct {
	cfg      *Config
	idle     int64
	mu       sync.RWMutex
	services map[string]*serviceState
	sweptAt  int64
	overflow *serviceState // holds everything beyond MaxServices
}

func newCardinality(cfg *Config) *cardinality {
	c := &cardinality{cfg: cfg, idle: int64(cfg.CardinalityIdle), services: map[string]*serviceState{}}
	c.overflow = c.newService(Overflow)
	return c
}

func (c *cardinality) newService(svc string) *serviceState {
	return &serviceState{
		name:      svc,
		threshold: c.cfg.slowThreshold(svc),
		endpoints: map[string]*endpointSlot{},
		tail:      newTailEstimate(c.cfg.TailQuantile, c.cfg.TailWindow, c.cfg.TailMinCount),
	}
}

// service returns svc's state, or the overflow state and true when svc is
// new and the cap is reached.
func lookupService[T name](c *cardinality, svc T, now int64) (*serviceState, bool) {
	c.mu.RLock()
	st := c.services[string(svc)]
	c.mu.RUnlock()
	if st != nil {
		st.lastSeen.Store(now)
		return st, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if st = c.services[string(svc)]; st != nil {
		st.lastSeen.Store(now)
		return st, false
	}
	if len(c.services) >= c.cfg.MaxServices && now-c.sweptAt >= int64(time.Second) {
		c.sweptAt = now
		for k, s := range c.services {
			if now-s.lastSeen.Load() > c.idle {
				delete(c.services, k)
			}
		}
	}
	if len(c.services) >= c.cfg.MaxServices {
		return c.overflow, true
	}
	st = c.newService(strings.Clone(string(svc))) // never pin a request's buffer
	st.lastSeen.Store(now)
	c.services[st.name] = st
	return st, false
}

// endpointLocked returns the interned endpoint name, or Overflow and true
// when ep is new and the cap is reached. The caller holds st.mu.
func endpointLocked[T name](st *serviceState, ep T, maxEndpoints int, idle, now int64) (string, bool) {
	if e := st.endpoints[string(ep)]; e != nil {
		e.lastSeen = now
		return e.name, false
	}
	if len(st.endpoints) >= maxEndpoints && now-st.sweptAt >= int64(time.Second) {
		st.sweptAt = now
		for k, e := range st.endpoints {
			if now-e.lastSeen > idle {
				delete(st.endpoints, k)
			}
		}
	}
	if len(st.endpoints) >= maxEndpoints {
		return Overflow, true
	}
	e := &endpointSlot{name: strings.Clone(string(ep)), lastSeen: now}
	st.endpoints[e.name] = e
	return e.name, false
}
