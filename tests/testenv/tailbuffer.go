package testenv

import (
	"fmt"
	"strings"
	"sync"
)

// TailBuffer is an io.Writer that keeps the newest limit bytes written to it,
// so a chatty child process cannot grow the test binary without bound. It is
// safe for concurrent use: give it as a process's output or a logger's, and
// read String while it is written.
type TailBuffer struct {
	mu      sync.Mutex
	limit   int
	buf     []byte
	dropped int64
}

// NewTailBuffer keeps the newest limit bytes (at least 1).
func NewTailBuffer(limit int) *TailBuffer {
	limit = max(limit, 1)
	return &TailBuffer{limit: limit}
}

func (b *TailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	// Trim only once the buffer is half again over the limit, so that the copy
	// is amortized over many writes.
	if over := len(b.buf) - b.limit; over > b.limit/2 {
		b.dropped += int64(over)
		b.buf = b.buf[:copy(b.buf, b.buf[over:])]
	}
	return len(p), nil
}

// String returns at most limit bytes, the newest, prefixed with a note when
// older output was dropped.
func (b *TailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	kept := b.buf
	dropped := b.dropped
	if over := len(kept) - b.limit; over > 0 {
		kept = kept[over:]
		dropped += int64(over)
	}
	if dropped == 0 {
		return string(kept)
	}
	return fmt.Sprintf("[testenv: %d older bytes dropped]\n%s", dropped, kept)
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	if n <= 0 {
		return ""
	}
	s = strings.TrimRight(s, "\n")
	end := len(s)
	for ; n > 0; n-- {
		nl := strings.LastIndexByte(s[:end], '\n')
		if nl < 0 {
			return s
		}
		end = nl
	}
	return s[end+1:]
}
