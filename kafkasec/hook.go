package kafkasec

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// refusalLogEvery bounds how often RefusalLog logs: franz-go retries a
// refused connection every few hundred milliseconds.
const refusalLogEvery = time.Minute

// RefusalLog logs a connection the brokers refuse once it is running (a
// password rotated at the broker before the Secret, a renewed broker
// certificate from another CA) at error level, at most once a minute, with
// what to fix. Check covers the start; without this, franz-go retries such
// a connection silently while records wait.
func RefusalLog(log *slog.Logger, c Config) kgo.Opt {
	return kgo.WithHooks(&refusalHook{log: log, cfg: c})
}

type refusalHook struct {
	log *slog.Logger
	cfg Config

	mu     sync.Mutex
	last   time.Time
	missed int
}

// OnBrokerConnect implements kgo.HookBrokerConnect; it sees the errors of
// the dial, the TLS handshake and the SASL flow.
func (h *refusalHook) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		return
	}
	err = Explain(err, h.cfg)
	if !errors.Is(err, ErrRefused) {
		return
	}
	h.mu.Lock()
	now := time.Now()
	if now.Sub(h.last) < refusalLogEvery {
		h.missed++
		h.mu.Unlock()
		return
	}
	missed := h.missed
	h.last, h.missed = now, 0
	h.mu.Unlock()
	h.log.Error("kafka: the broker refused the connection; nothing is produced or consumed on it until this is fixed",
		"broker", meta.Host, "refusals_since_last_log", missed, "err", err)
}
