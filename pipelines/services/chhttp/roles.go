package chhttp

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
)

// forced are the settings the handler sets last on every statement of
// role: forcedSettings, the execution cap (lowered by the client's
// max_execution_time, never lifted), and for the read-only role readonly =
// 2, the engine's own refusal of every write.
func (h *Handler) forced(role Role) [][2]string {
	out := append([][2]string(nil), forcedSettings...)
	out = append(out, [2]string{"max_execution_time", strconv.FormatFloat(h.cfg.MaxExecutionTime.Seconds(), 'f', 0, 64)})
	if role == RoleReadOnly {
		out = append(out, [2]string{"readonly", "2"})
	}
	return out
}

// settingDefaults are the engine's settings as a statement starts with
// them (system.settings), read once.
type settingDefaults struct {
	mu     sync.Mutex
	values map[string]string
}

func (h *Handler) settingDefault(ctx context.Context, eng Engine, name string) (string, bool) {
	d := &h.defaults
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.values == nil {
		var out bytes.Buffer
		if err := eng.QueryRaw(ctx, store.RawStatement{Query: "SELECT name, value FROM system.settings", Database: h.database}, "TSVRaw", &out); err != nil {
			return "", false // refused: the caller cannot compare
		}
		m := map[string]string{}
		for _, line := range strings.Split(out.String(), "\n") {
			if k, v, ok := strings.Cut(line, "\t"); ok {
				m[k] = v
			}
		}
		d.values = m
	}
	v, ok := d.values[name]
	return v, ok
}

// run runs one statement through fn, marked so that it can be found in
// the engine's list of running statements: when the client leaves before
// it ends, the statement is killed (on the control pool) instead of
// running on, holding its connection, until the execution cap.
func (h *Handler) run(ctx context.Context, fn func(context.Context, store.RawStatement) error, st store.RawStatement) error {
	marker := fmt.Sprintf("spikehunt-chhttp-%d-%d", time.Now().UnixNano(), h.seq.Add(1))
	st.Query = "/* " + marker + " */ " + st.Query
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
		case <-ctx.Done():
			h.kill(marker)
		}
	}()
	return fn(ctx, st)
}

// kill ends the statement carrying marker. The KILL's own text names the
// marker only in two halves, so that it does not match itself.
func (h *Handler) kill(marker string) {
	half := len(marker) / 2
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	q := "KILL QUERY WHERE position(query, concat(" + store.QuoteString(marker[:half]) + ", " + store.QuoteString(marker[half:]) + ")) > 0 SYNC"
	var out bytes.Buffer
	if err := h.pools.Control.QueryRaw(ctx, store.RawStatement{Query: q, Database: h.database}, "TSVRaw", &out); err != nil {
		h.cfg.Logger.Warn("kill an abandoned statement", "err", err)
		return
	}
	if strings.Contains(out.String(), "finished") || strings.Contains(out.String(), "waiting") || out.Len() > 0 {
		h.killed.Inc()
	}
}
