package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spikehunt/spikehunt/agents/export"
	"github.com/spikehunt/spikehunt/kafkasec"
)

// kafkaCheckTimeout bounds the start-up check of a secured Kafka sink.
const kafkaCheckTimeout = 15 * time.Second

// checkKafka refuses to start with a Kafka security configuration the
// brokers refuse (a wrong password or CA): once running, the client would
// retry it silently for ever while the spool fills. Brokers that do not
// answer are only logged: the agent spools until they are back. A
// plaintext sink is not checked, since nothing in it can be refused. On
// error the sink is closed.
func checkKafka(ctx context.Context, ks *export.KafkaSink, sec kafkasec.Config, log *slog.Logger) error {
	if !sec.Enabled() {
		return nil
	}
	if sec.TLS.DangerousSkipVerify {
		log.Warn("kafka: broker certificates are NOT verified (kafka.tls.dangerous_skip_verify): anyone on the path can read and forge the connection")
	}
	cctx, cancel := context.WithTimeout(ctx, kafkaCheckTimeout)
	defer cancel()
	err := ks.Check(cctx)
	switch {
	case err == nil:
		log.Info("kafka: connected", "security", sec.String())
		return nil
	case errors.Is(err, kafkasec.ErrRefused):
		ks.Close()
		return fmt.Errorf("kafka sink: %w", err)
	}
	log.Warn("kafka: brokers not reachable at start; spooling until they are", "security", sec.String(), "err", err)
	return nil
}
