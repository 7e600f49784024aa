package e2e

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopShared()
	os.Exit(code)
}

// logTail keeps the newest output of every component the test runs in
// process (the controllers, the intake, the agent's engine and watcher,
// the ingest): printed when the test fails, or as it goes with
// SPIKEHUNT_TEST_LOG set.
type logTail struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	limit int
	echo  bool
}

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.echo {
		os.Stderr.Write(p)
	}
	l.buf.Write(p)
	if over := l.buf.Len() - l.limit; over > 0 {
		b := l.buf.Bytes()[over:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
		rest := bytes.Clone(b)
		l.buf.Reset()
		l.buf.Write(rest)
	}
	return len(p), nil
}

func (l *logTail) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Reset()
}

func (l *logTail) lastLines(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := strings.Split(strings.TrimRight(l.buf.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// The components' log: one per process, because controller-runtime takes
// its logger once (later SetLogger calls are ignored); each test starts
// it afresh.
var (
	tail     = &logTail{limit: 4 << 20, echo: os.Getenv("SPIKEHUNT_TEST_LOG") != ""}
	tailOnce sync.Once
)

// newLog returns a logger for every component of the test, and makes it
// controller-runtime's; the tail is logged if t fails.
func newLog(t *testing.T) *slog.Logger {
	log := slog.New(slog.NewTextHandler(tail, &slog.HandlerOptions{Level: slog.LevelDebug}))
	tailOnce.Do(func() { ctrl.SetLogger(logr.FromSlogHandler(log.Handler())) })
	tail.reset()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("components' log (tail):\n%s", tail.lastLines(300))
		}
	})
	return log
}
