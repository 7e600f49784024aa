package ingest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// health is what the ingester reports on /healthz: starting until its
// start-up checks pass, then ok, or degraded while partitions are held
// on a dead-letter topic that refuses writes or while a source topic does
// not exist. It is read by the HTTP server's goroutines and written by
// Run's, hence the lock.
type health struct {
	mu       sync.Mutex
	starting string // non-empty: why it has not started consuming yet
	holds    map[topicPartition]error
	missing  map[string]bool // source topics that do not exist yet
}

func newHealth() health {
	return health{starting: "starting: dead-letter topic and deduplication window not checked yet", holds: map[topicPartition]error{},
		missing: map[string]bool{}}
}

func (h *health) topicMissing(topic string, missing bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if missing {
		h.missing[topic] = true
	} else {
		delete(h.missing, topic)
	}
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
// refuses writes (they resume by themselves once it takes them).
//
// A source topic that does not exist is ok but "degraded: source topic
// … does not exist yet …": nothing is wrong with this ingester (a fleet
// that sends only spans never creates the metrics topic), so it is not
// to be taken out of service or restarted for it, but the answer names
// the topic. Safe for concurrent use.
func (in *Ingester) Health() (ok bool, detail string) {
	h := &in.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.starting != "" {
		return false, h.starting
	}
	if len(h.holds) == 0 {
		if len(h.missing) == 0 {
			return true, "ok"
		}
		missing := slices.Sorted(maps.Keys(h.missing))
		return true, fmt.Sprintf("degraded: source topic %s does not exist yet; consuming the others and watching for it (spikehunt_ingest_topic_missing)",
			strings.Join(missing, ", "))
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
