package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/kafkasec"
	"github.com/spikehunt/spikehunt/pipelines/cli"
	"github.com/spikehunt/spikehunt/pipelines/services/ingest"
)

func runIngest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("ingest", "Consumes the OTLP topics (spans → requests, metrics → counters) into ClickHouse, exactly\nonce: each batch is inserted with a deduplication token named after its Kafka offsets,\nand the offsets are committed after the insert. Undecodable messages, rows outside the\naccepted time window and rows ClickHouse refuses go to the dead-letter topic (created\nat start if missing); it refuses to start when a table's deduplication window is too\nsmall for these settings. /metrics and /healthz are served on --listen.", stderr)
	dsn := fs.String("dsn", cli.EnvOr("SPIKEHUNT_DSN", ""), "ClickHouse store: chdb:///dir, clickhouse://…, http(s)://… (env SPIKEHUNT_DSN)")
	storeWait := fs.Duration("store-wait", store.DefaultOpenWait, "at start, how long to wait for a ClickHouse server that cannot be reached yet (0: fail at once)")
	brokers := fs.String("kafka.brokers", cli.EnvOr("SPIKEHUNT_KAFKA_BROKERS", "127.0.0.1:9092"), "Kafka bootstrap brokers, comma-separated (env SPIKEHUNT_KAFKA_BROKERS)")
	group := fs.String("group", ingest.DefaultGroup, "Kafka consumer group")
	spans := fs.String("topic.spans", ingest.DefaultSpansTopic, "topic of OTLP trace export requests")
	metricsTopic := fs.String("topic.metrics", ingest.DefaultMetricsTopic, "topic of OTLP metrics export requests")
	dlq := fs.String("topic.dlq", ingest.DefaultDLQTopic, "dead-letter topic")
	watchEvery := fs.Duration("topic.watch-every", 10*time.Second, "how often to look for a source topic that does not exist yet; the others are consumed meanwhile, and it is consumed once it exists (/healthz: degraded, naming it)")
	rows := fs.Int("batch.rows", 300_000, "insert a partition's batch at this many rows")
	bytes := fs.Int("batch.bytes", 32<<20, "… or at this many bytes of messages")
	delay := fs.Duration("batch.delay", time.Second, "… or this long after its first message")
	catchUp := fs.Duration("batch.catch-up-delay", 0, "… but while behind on the partition, this long instead: bigger inserts when catching up, cheaper for ClickHouse (0: the larger of 10s and --batch.delay)")
	migrate := fs.Bool("migrate", false, "apply the schema migrations first (single node)")
	listen := fs.String("listen", "127.0.0.1:9465", "address for /metrics and /healthz (empty: none)")
	limits := observabilityLimits()
	limitFlags(fs, &limits)
	pprofOn := fs.Bool("debug.pprof", false, "also serve /debug/pprof/ on --listen (profiling; not for an exposed address)")
	instance := fs.String("instance-id", cli.EnvOr("SPIKEHUNT_INSTANCE_ID", ""), "static group member id (a StatefulSet pod name): a restart keeps its partitions at once (env SPIKEHUNT_INSTANCE_ID)")
	name := fs.String("instance", cli.EnvOr("SPIKEHUNT_INSTANCE", ""), "name of this process in the host column of its own counters rows, spikehunt.ingest.* (default: --instance-id, else the host name; env SPIKEHUNT_INSTANCE)")
	report := fs.Duration("report-every", ingest.DefaultReportEvery, "write those rows this often (and once more at shutdown)")
	session := fs.Duration("kafka.session-timeout", 45*time.Second, "how long the group waits for a silent member")
	rebalance := fs.Duration("kafka.rebalance-timeout", ingest.DefaultRebalanceTimeout, "how long the group waits for members when a rebalance begins; a member stops inserting what it polled this long (less two heartbeats and 1s) after the poll, as the group may have moved its partitions by then")
	maxAge := fs.Duration("accept.max-age", 0, "rows older than this (by their own time) are not inserted; their message goes to the dead-letter topic with reason timestamp, its other rows are inserted (0: the destination table's TTL; negative: no bound)")
	maxAhead := fs.Duration("accept.max-ahead", ingest.DefaultMaxAhead, "… and rows more than this ahead of the ingester's clock (negative: no bound)")
	dlqParts := fs.Int("topic.dlq-partitions", 1, "partitions of the dead-letter topic when the ingester creates it at start (it does when the topic is missing)")
	kafkaSec := kafkasec.AddFlags(fs, "kafka.", kafkasec.Config{})
	noDedup := fs.Bool("unsafe.no-dedup", false, "insert without deduplication tokens: loses exactly-once (for the control run of the crash test)")
	skipDedupCheck := fs.Bool("unsafe.skip-dedup-check", false, "start even if a table's deduplication window is smaller than these batch and group settings need (the start-up error says how much is needed): loses exactly-once across crashes and rebalances")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if err := limits.validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return cli.ErrUsage
	}
	if *dsn == "" {
		fmt.Fprintln(stderr, "--dsn is required")
		return cli.ErrUsage
	}
	st, err := store.OpenWaiting(ctx, *dsn, *storeWait, func(err error, left time.Duration) {
		fmt.Fprintf(stderr, "%s: waiting for the store (%v left): %v\n", "ingest", left.Round(time.Second), err)
	})
	if err != nil {
		return err
	}
	defer st.Close()
	if *migrate {
		if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
			return err
		}
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	cfg := ingest.Config{
		Brokers: strings.Split(*brokers, ","), Group: *group, SpansTopic: *spans, MetricsTopic: *metricsTopic, DLQTopic: *dlq,
		MaxRows: *rows, MaxBytes: *bytes, MaxDelay: *delay, CatchUpDelay: *catchUp, NoDedup: *noDedup,
		InstanceID: *instance, SessionTimeout: *session, Instance: *name, ReportEvery: *report,
		RebalanceTimeout: *rebalance, MaxAge: *maxAge, MaxAhead: *maxAhead, DLQPartitions: int32(*dlqParts), SkipDedupCheck: *skipDedupCheck,
		TopicWatchEvery: *watchEvery,
		Security:        kafkaSec.Config(),
	}
	if cfg.Instance == "" {
		cfg.Instance = *instance
	}
	in, err := ingest.New(cfg, st, logger)
	if err != nil {
		return err
	}
	reg := newRegistry()
	if err := in.Register(reg); err != nil {
		return err
	}
	if *listen != "" {
		mux := observabilityMux(reg, st, in.Health)
		if *pprofOn {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		}
		srv, ln, err := listenHTTP(*listen, mux, limits)
		if err != nil {
			return err
		}
		go srv.Serve(ln)
		defer srv.Close()
		fmt.Fprintf(stdout, "spikehunt ingest: %s, %s → %s; metrics http://%s/metrics\n", *spans, *metricsTopic, st.Backend(), ln.Addr())
	}
	if err := in.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
