package alertintake

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// recordingSink keeps what it was given, one slice per Emit.
type recordingSink struct {
	mu    sync.Mutex
	calls [][]Alert
	err   error // returned by Emit when set
}

func (s *recordingSink) Emit(_ context.Context, alerts []Alert) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.calls = append(s.calls, alerts)
	return nil
}

func (s *recordingSink) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = nil
}

// alerts returns everything emitted, flattened, and how many Emit calls
// brought it.
func (s *recordingSink) alerts() ([]Alert, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []Alert
	for _, c := range s.calls {
		all = append(all, c...)
	}
	return all, len(s.calls)
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustTime(t testing.TB, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}
