package ingest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// health is what the ingester reports on /healthz: starting until its
// start-up checks pass, then ok, or degraded while partitions are held
// on a dead-letter topic that refuses writes. It is read by the HTTP
// server's goroutines and written by Run's, hence the lock.
type health struct {
	mu       sync.Mutex
	starting string // non-empty: why it has not started consuming yet
	holds    map[topicPartition]error
}

func newHealth() health {
	return health{starting: "starting: dead-letter topic and deduplication window not checked yet", holds: map[topicPartition]error{}}
}

func (h *health) setStarting(why string) {
	h.mu.Lock()
	h.starting = why
	h.mu.Unlock()
}

// held records that tp is held for err, or released when err is nil.
func (h *health) held(tp topicPartition, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		delete(h.holds, tp)
	} else {
		h.holds[tp] = err
	}
}

// Health says whether the ingester is consuming every partition it owns,
// and if not, why: "starting: …" before its start-up checks passed,
// "degraded: …" while partitions are held because the dead-letter topic
// refuses writes (they resume by themselves once it takes them). Safe for
// concurrent use.
func (in *Ingester) Health() (ok bool, detail string) {
	h := &in.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.starting != "" {
		return false, h.starting
	}
	if len(h.holds) == 0 {
		return true, "ok"
	}
	var held []string
	var last error
	for tp, err := range h.holds {
		held = append(held, fmt.Sprintf("%s/%d", tp.topic, tp.partition))
		last = err
	}
	slices.Sort(held)
	return false, fmt.Sprintf("degraded: %d partitions held (%s) until their dead letters are written: %v", len(held), strings.Join(held, ", "), last)
}
