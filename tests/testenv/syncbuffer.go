package testenv

import (
	"strings"
	"sync"
)

// SyncBuffer is an io.Writer that keeps all that is written to it and is
// safe for concurrent use: a process's output or a logger that a test
// reads while it is written. It keeps everything, so give it only output
// the test itself bounds; a child that may chat without end wants a
// TailBuffer.
type SyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
