package main

import (
	"context"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// With --sink otlp the agent exports to the real gateway Collector
// (pipelines/services/otel), which writes Kafka records keyed by the agent's host,
// with the spans and counters intact.
func TestAgentThroughTheGatewayCollector(t *testing.T) {
	k := testenv.SharedKafka(t)
	const spansTopic, metricsTopic = "gw_otlp_spans", "gw_otlp_metrics"
	for _, topic := range []string{spansTopic, metricsTopic} {
		if err := k.CreateTopic(context.Background(), topic, 3); err != nil {
			t.Fatal(err)
		}
	}
	grpcAddr := testenv.StartCollector(t, "../../../pipelines/services/otel/config.yaml",
		"KAFKA_BROKERS=["+k.Brokers()[0]+"]", "SPANS_TOPIC="+spansTopic, "METRICS_TOPIC="+metricsTopic)

	p := startAgent(t, k.Brokers(), t.TempDir(), "--host-name", "gw-node", "--sink", "otlp", "--otlp.endpoint", grpcAddr, "--otlp.insecure")
	const n = 300
	var lines []string
	for i := range n {
		lines = append(lines, "billy /gw 900000 200 "+traceID(1_000_000+i)) // slow: every one kept, weight 1
	}
	sendLines(t, p.sock, lines)
	c := consumeTopics(t, k, spansTopic, metricsTopic, func(c *consumed) bool {
		return len(c.spans) >= n && c.points["system.cpu.time"] > 0
	}, 60*time.Second)
	for i := range n {
		if c.spans[traceID(1_000_000+i)] != 1 || c.weights[traceID(1_000_000+i)] != 1 {
			t.Fatalf("request %d: seen %d times with weight %d through the gateway, want once with weight 1", i, c.spans[traceID(1_000_000+i)], c.weights[traceID(1_000_000+i)])
		}
	}
	if !c.hosts["gw-node"] || len(c.hosts) != 1 {
		t.Errorf("hosts %v, want gw-node only", c.hosts)
	}
	if c.points["system.cpu.time"] == 0 {
		t.Error("no counters through the gateway")
	}
}
