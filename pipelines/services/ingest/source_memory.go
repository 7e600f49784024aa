package ingest

import (
	"context"
	"hash/fnv"
	"sync"
)

// MemorySource is an in-process stand-in for Kafka, for the embedded demo:
// producers Produce into per-partition logs, one ingester consumes them
// through the same batching and handshake as from Kafka. Offsets and
// commits live in memory, so they end with the process; messages are
// freed once committed. Dead letters are kept for DeadLetters.
type MemorySource struct {
	partitions int32

	mu        sync.Mutex
	logs      map[topicPartition]*memLog
	dead      []DeadLetter
	wake      chan struct{} // closed and replaced when a message arrives
	owner     partitionOwner
	announced map[topicPartition]bool
}

// DeadLetter is a message the ingester could not ingest, with why.
type DeadLetter struct {
	Message
	Reason, Detail string
	// Partial: some of the message's rows were ingested (the rest were
	// refused; see window.go), so a replay must skip those.
	Partial bool
}

// memLog is one partition: messages from offset base on.
type memLog struct {
	base      int64
	msgs      []Message
	next      int64 // the consumer's position
	held      bool  // not handed out until released
	committed int64
}

// NewMemorySource returns a source whose topics have partitions
// partitions each (at least 1).
func NewMemorySource(partitions int) *MemorySource {
	return &MemorySource{partitions: int32(max(partitions, 1)), logs: map[topicPartition]*memLog{},
		wake: make(chan struct{}), announced: map[topicPartition]bool{}}
}

// attach makes owner the source's only consumer. A new owner starts where
// the last one committed and is told about every partition again.
func (s *MemorySource) attach(owner partitionOwner) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.owner = owner
	for _, l := range s.logs {
		l.next = l.committed
	}
	s.announced = map[topicPartition]bool{}
}

// Produce appends value to topic, on the partition its key hashes to, as
// a Kafka producer would; it returns the partition and offset.
func (s *MemorySource) Produce(topic string, key, value []byte) (int32, int64) {
	h := fnv.New32a()
	h.Write(key)
	tp := topicPartition{topic, int32(h.Sum32() % uint32(s.partitions))}
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.log(tp)
	off := l.base + int64(len(l.msgs))
	l.msgs = append(l.msgs, Message{Topic: topic, Partition: tp.partition, Offset: off, Key: key, Value: value})
	close(s.wake)
	s.wake = make(chan struct{})
	return tp.partition, off
}

func (s *MemorySource) log(tp topicPartition) *memLog {
	l := s.logs[tp]
	if l == nil {
		l = &memLog{}
		s.logs[tp] = l
	}
	return l
}

// Lag is how many produced messages are not yet committed.
func (s *MemorySource) Lag() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, l := range s.logs {
		n += l.base + int64(len(l.msgs)) - l.committed
	}
	return n
}

// DeadLetters returns the messages dead-lettered so far.
func (s *MemorySource) DeadLetters() []DeadLetter {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]DeadLetter(nil), s.dead...)
}

// Poll returns every message past each partition's position, waiting for
// one until ctx ends. A partition is announced to the ingester (which then
// reads its intent) before its first message, and its messages are handed
// out only once the announcement has finished within ctx.
func (s *MemorySource) Poll(ctx context.Context) ([]Message, error) {
	for {
		s.mu.Lock()
		var fresh map[string][]int32
		for tp := range s.logs {
			if !s.announced[tp] {
				if fresh == nil {
					fresh = map[string][]int32{}
				}
				fresh[tp.topic] = append(fresh[tp.topic], tp.partition)
				s.announced[tp] = true
			}
		}
		owner := s.owner
		s.mu.Unlock()
		if fresh != nil && owner != nil {
			if unread := owner.assigned(ctx, fresh); unread != nil {
				// The poll ended before every intent was read: a batch
				// formed without its partition's intent would re-insert a
				// crashed batch under another token. Announce these
				// partitions again next poll; hand out nothing now.
				s.mu.Lock()
				for topic, parts := range unread {
					for _, p := range parts {
						delete(s.announced, topicPartition{topic, p})
					}
				}
				s.mu.Unlock()
				return nil, nil
			}
		}

		s.mu.Lock()
		var out []Message
		for _, l := range s.logs {
			if l.held {
				continue
			}
			end := l.base + int64(len(l.msgs))
			for off := l.next; off < end; off++ {
				m := l.msgs[off-l.base]
				m.Lag = end - off - 1
				out = append(out, m)
			}
			l.next = end
		}
		wake := s.wake
		s.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-wake:
		}
	}
}

// Commit frees the partition's messages before next.
func (s *MemorySource) Commit(_ context.Context, topic string, partition int32, next int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.log(topicPartition{topic, partition})
	if next > l.committed {
		l.committed = next
	}
	if drop := l.committed - l.base; drop > 0 && drop <= int64(len(l.msgs)) {
		l.msgs = append([]Message(nil), l.msgs[drop:]...)
		l.base = l.committed
	}
	return nil
}

func (s *MemorySource) DeadLetter(_ context.Context, d DeadLetter) error {
	s.mu.Lock()
	s.dead = append(s.dead, d)
	s.mu.Unlock()
	return nil
}

// Prepare has nothing to create: dead letters are kept in memory, and
// the partitions are the source's own, not a group's.
func (s *MemorySource) Prepare(context.Context) (map[string]int32, error) { return nil, nil }

// Appeared: every topic of the in-process log exists from the start.
func (s *MemorySource) Appeared() map[string]int32 { return nil }
func (s *MemorySource) Start(string)               {}

func (s *MemorySource) Hold(topic string, partition int32) {
	s.mu.Lock()
	s.log(topicPartition{topic, partition}).held = true
	s.mu.Unlock()
}

func (s *MemorySource) Release(topic string, partition int32, next int64) {
	s.mu.Lock()
	l := s.log(topicPartition{topic, partition})
	l.held = false
	if next >= 0 {
		l.next = next
	}
	close(s.wake)
	s.wake = make(chan struct{})
	s.mu.Unlock()
}

func (s *MemorySource) Between() {}
func (s *MemorySource) Close()   {}
