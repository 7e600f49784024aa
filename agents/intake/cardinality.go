package intake

import (
	"container/heap"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Overflow is the service and endpoint name that requests beyond the
// cardinality caps are filed under.
const Overflow = "_overflow"

// A name arrives as a string (OTLP, decoded by pdata) or as bytes of a
// datagram (line protocol). Map lookups with string(b) do not allocate, so
// a known name costs no garbage whichever way it came.
type name interface{ ~string | ~[]byte }

// serviceState is what the intake keeps per service: its endpoints and its
// rolling tail. mu guards everything but its slot's counters.
type serviceState struct {
	name      string
	threshold time.Duration // fixed slow threshold; 0 = none
	slot      *slot         // its place among the services; nil for Overflow

	mu        sync.Mutex
	endpoints *slotTable[string]
	tail      *tailEstimate
	rate      sampleRate
}

// Cardinality caps: at most MaxServices services on this host and
// MaxEndpoints endpoints per service; a name beyond them is filed under
// _overflow. Which names hold the slots is decided by volume, so that a
// few requests now and then from many names cannot squat every slot
// while the service that carries the traffic lands in _overflow:
//
//   - Each slot counts its requests, decayed with a half-life of
//     cardinality_half_life (score).
//   - The names in _overflow are counted in a space-saving sketch
//     (Metwally et al., "Efficient computation of frequent and top-k
//     elements in data streams", 2005) of as many entries as there are
//     slots: a name not in it takes the place of the least counted one,
//     and inherits its count as its possible error. Memory stays bounded
//     whatever the names, and every name whose share of the overflow
//     exceeds 1/size is in it.
//   - A name in the sketch whose sure count (count − error) passes twice
//     the score of the quietest slot, plus one, takes its slot; the
//     evicted name is counted in spikehunt_intake_cardinality_evictions_total.
//     The factor two keeps two names of about the same traffic from
//     trading a slot back and forth (each trade resets the service's
//     rolling tail).
//   - At most once a second, when a lookup misses with the slots full,
//     the scores are decayed, names idle for cardinality_idle are freed,
//     and the slots are sorted by score: evictions take them in that
//     order until the next pass.
//
// A known name costs a map lookup and an atomic add; a name in _overflow
// costs O(log size) in the sketch.

// slot is one name's place in a slotTable.
type slot struct {
	name     string
	hits     atomic.Int64 // requests since the last pass
	lastSeen atomic.Int64 // unix ns
	score    float64      // decayed requests as of the last pass
}

func (s *slot) touch(now int64) {
	s.hits.Add(1)
	s.lastSeen.Store(now)
}

// slotTable holds up to max names with their values. It is not safe for
// concurrent use, except that slot counters are atomic: a caller may
// touch a slot it found under a read lock.
type slotTable[V any] struct {
	max      int
	idle     int64   // unix ns
	halfLife float64 // ns
	slots    map[string]*slotEntry[V]
	sketch   sketch
	passAt   int64
	order    []*slot // by score, as of the last pass; the next evicted first
	evicted  prometheus.Counter
}

type slotEntry[V any] struct {
	slot *slot
	val  V
}

func newSlotTable[V any](max int, cfg *Config, evicted prometheus.Counter) *slotTable[V] {
	return &slotTable[V]{max: max, idle: int64(cfg.CardinalityIdle), halfLife: float64(cfg.CardinalityHalfLife),
		slots: map[string]*slotEntry[V]{}, sketch: newSketch(max), evicted: evicted}
}

// get returns name's value and slot when it has one.
func get[V any, T name](t *slotTable[V], name T) (*slotEntry[V], bool) {
	e, ok := t.slots[string(name)]
	return e, ok
}

// miss handles n requests of a name without a slot, at now: it gives the
// name a slot when one is free or it has earned one (then fresh builds
// its value), and reports whether it did.
func miss[V any, T name](t *slotTable[V], nm T, n int64, now int64, fresh func(string) V) (*slotEntry[V], bool) {
	if len(t.slots) >= t.max && now-t.passAt >= int64(time.Second) {
		t.pass(now)
	}
	if len(t.slots) < t.max {
		removeName(&t.sketch, nm) // counted while the slots were full
		return t.admit(strings.Clone(string(nm)), 0, now, fresh), true
	}
	sure := addName(&t.sketch, nm, float64(n))
	for len(t.order) > 0 {
		weakest := t.order[0]
		if e, ok := t.slots[weakest.name]; !ok || e.slot != weakest { // freed since the pass
			t.order = t.order[1:]
			continue
		}
		if sure <= 2*(weakest.score+float64(weakest.hits.Load()))+1 {
			return nil, false
		}
		t.order = t.order[1:]
		delete(t.slots, weakest.name)
		t.evicted.Inc()
		removeName(&t.sketch, nm)
		return t.admit(strings.Clone(string(nm)), sure, now, fresh), true
	}
	return nil, false
}

func (t *slotTable[V]) admit(name string, score float64, now int64, fresh func(string) V) *slotEntry[V] {
	e := &slotEntry[V]{slot: &slot{name: name, score: score}, val: fresh(name)}
	e.slot.touch(now)
	t.slots[name] = e
	return e
}

// pass decays the scores, frees idle slots and orders the rest for
// eviction.
func (t *slotTable[V]) pass(now int64) {
	decay := math.Exp2(-float64(now-t.passAt) / t.halfLife)
	if t.passAt == 0 {
		decay = 1
	}
	t.passAt = now
	t.order = t.order[:0]
	for k, e := range t.slots {
		s := e.slot
		if now-s.lastSeen.Load() > t.idle {
			delete(t.slots, k)
			continue
		}
		s.score = s.score*decay + float64(s.hits.Swap(0))
		t.order = append(t.order, s)
	}
	slices.SortFunc(t.order, func(a, b *slot) int { return cmpFloat(a.score, b.score) })
	t.sketch.decay(decay)
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sketch is a space-saving count of the names without a slot: a min-heap
// of counters by count, and a map from name to counter.
type sketch struct {
	size  int
	byKey map[string]*counter
	heap  counterHeap
}

type counter struct {
	name       string
	count, err float64
	i          int // index in the heap
}

func newSketch(size int) sketch {
	return sketch{size: size, byKey: map[string]*counter{}} // no size hint: most services have a few endpoints
}

// addName counts n requests of nm and returns its sure count: at least
// that many of them arrived since it entered the sketch (decayed).
func addName[T name](s *sketch, nm T, n float64) float64 {
	if c, ok := s.byKey[string(nm)]; ok {
		c.count += n
		heap.Fix(&s.heap, c.i)
		return c.count - c.err
	}
	if len(s.heap) < s.size {
		c := &counter{name: strings.Clone(string(nm)), count: n}
		s.byKey[c.name] = c
		heap.Push(&s.heap, c)
		return n
	}
	c := s.heap[0] // the least counted makes room
	delete(s.byKey, c.name)
	c.name, c.err = strings.Clone(string(nm)), c.count
	c.count += n
	s.byKey[c.name] = c
	heap.Fix(&s.heap, 0)
	return n
}

func removeName[T name](s *sketch, nm T) {
	if c, ok := s.byKey[string(nm)]; ok {
		delete(s.byKey, c.name)
		heap.Remove(&s.heap, c.i)
	}
}

// decay scales every count; the order stays.
func (s *sketch) decay(f float64) {
	for _, c := range s.heap {
		c.count *= f
		c.err *= f
	}
}

type counterHeap []*counter

func (h counterHeap) Len() int           { return len(h) }
func (h counterHeap) Less(i, j int) bool { return h[i].count < h[j].count }
func (h counterHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].i, h[j].i = i, j
}
func (h *counterHeap) Push(x any) {
	c := x.(*counter)
	c.i = len(*h)
	*h = append(*h, c)
}
func (h *counterHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return c
}

// cardinality is the service table, behind a read-write lock: a known
// service is found under the read lock.
type cardinality struct {
	cfg      *Config
	m        *metrics
	mu       sync.RWMutex
	services *slotTable[*serviceState]
	overflow *serviceState // holds everything beyond MaxServices
}

func newCardinality(cfg *Config, m *metrics) *cardinality {
	c := &cardinality{cfg: cfg, m: m}
	c.services = newSlotTable[*serviceState](cfg.MaxServices, cfg, m.evictService)
	c.overflow = c.newService(Overflow)
	return c
}

func (c *cardinality) newService(svc string) *serviceState {
	return &serviceState{
		name:      svc,
		threshold: c.cfg.slowThreshold(svc),
		endpoints: newSlotTable[string](c.cfg.MaxEndpoints, c.cfg, c.m.evictEndpoint),
		tail:      newTailEstimate(c.cfg.TailQuantile, c.cfg.TailWindow, c.cfg.TailMinCount),
	}
}

// lookupService returns svc's state and counts a request of it, or the
// overflow state and true when svc has no slot.
func lookupService[T name](c *cardinality, svc T, now int64) (*serviceState, bool) {
	c.mu.RLock()
	e, ok := get(c.services, svc)
	c.mu.RUnlock()
	if ok {
		e.slot.touch(now)
		return e.val, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok = get(c.services, svc); ok {
		e.slot.touch(now)
		return e.val, false
	}
	e, ok = miss(c.services, svc, 1, now, c.newService)
	if !ok {
		return c.overflow, true
	}
	e.val.slot = e.slot // before the write lock is released, so before anyone sees it
	return e.val, false
}

// countOverflow adds n requests of svc, filed under _overflow from tally's
// cache, to its count in the sketch; it may earn svc a slot.
func countOverflow[T name](c *cardinality, svc T, n int64, now int64) {
	if n <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := get(c.services, svc); !ok {
		if e, ok := miss(c.services, svc, n, now, c.newService); ok {
			e.val.slot = e.slot
		}
	}
}

// endpointLocked returns the interned endpoint name, or Overflow and true
// when ep has no slot. The caller holds st.mu.
func endpointLocked[T name](st *serviceState, ep T, now int64) (string, bool) {
	if e, ok := get(st.endpoints, ep); ok {
		e.slot.touch(now)
		return e.val, false
	}
	e, ok := miss(st.endpoints, ep, 1, now, func(s string) string { return s })
	if !ok {
		return Overflow, true
	}
	return e.val, false
}
