package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/kafkasec"
)

// kafkaCheckTimeout bounds the start-up check of a secured connection.
const kafkaCheckTimeout = 15 * time.Second

// checkSecurity fails with what to fix when the brokers refuse a secured
// client (a wrong password or CA), which franz-go would otherwise retry
// without a word for ever. Brokers that do not answer are only logged: the
// consumer waits for them. A plaintext client is not checked.
func checkSecurity(cl *kgo.Client, sec kafkasec.Config, log *slog.Logger) error {
	if !sec.Enabled() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), kafkaCheckTimeout)
	defer cancel()
	err := kafkasec.Check(ctx, cl, sec)
	switch {
	case err == nil:
		log.Info("ingest: kafka: connected", "security", sec.String())
		return nil
	case errors.Is(err, kafkasec.ErrRefused):
		return fmt.Errorf("ingest: kafka: %w", err)
	}
	log.Warn("ingest: kafka: brokers not reachable at start; waiting for them", "security", sec.String(), "err", err)
	return nil
}
