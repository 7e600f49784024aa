package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/alertsig"
	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/kafkasec"
	"github.com/spikehunt/spikehunt/pipelines/cli"
	"github.com/spikehunt/spikehunt/pipelines/services/alerts"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
	"github.com/spikehunt/spikehunt/pipelines/services/detectsvc"
)

func runDetect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("detect", `Runs the detectors: per-host spike windows from latency_1s, their suspects from the
kernel counters, and the fleet patterns of each service over a look-back. The first
pass covers [--from, --to), or the --since before --to ("as of" --to, default now);
with --every, later passes cover the time since the last one, keeping --to's
distance from the clock. `+cli.TimeGrammar+`. Re-running a range rewrites the same rows; rows a
re-run no longer produces are retracted. One summary line per pass on stdout.`, stderr)
	dsn := fs.String("dsn", cli.EnvOr("SPIKEHUNT_DSN", ""), "ClickHouse store: chdb:///dir, clickhouse://…, http(s)://… (env SPIKEHUNT_DSN)")
	storeWait := fs.Duration("store-wait", store.DefaultOpenWait, "at start, how long to wait for a ClickHouse server that cannot be reached yet (0: fail at once)")
	service := fs.String("service", "", "service to examine (empty: every service in latency_1s over the look-back)")
	rng := cli.AddTimeRange(fs, "6h")
	cli.Deprecate(fs, "until", "to")
	every, lookback := new(time.Duration), new(time.Duration)
	cli.DurationVar(fs, every, "every", 30*time.Second, true, "run a pass this often (0: once): a duration, 30s, 5m or 1d")
	cli.DurationVar(fs, lookback, "lookback", detect.DefaultLookback, false, "span of spike windows the pattern classifier looks at: a duration, 6h or 1d")
	k := fs.Float64("k", detect.DefaultK, "a second is slow past k × the typical latency (the larger of the fleet's and the host's bucket median)")
	floor := fs.Duration("floor", detect.DefaultFloor, "… and past this absolute floor")
	falsePerHostHour := fs.Float64("false-per-host-hour", detect.DefaultFalsePerHostHour, "… with company: the bars a stall's requests must pass come from each host's own latency tail, set so that its body alone gives at most this many windows per host-hour")
	cli.Group(fs, "k", "floor", "false-per-host-hour")
	gap := fs.Duration("gap", detect.DefaultMergeGap, "slow seconds at most this far apart are one window")
	bucket := fs.Duration("bucket", detect.DefaultBucket, "time slice the medians are taken over")
	pad := fs.Duration("pad", detect.DefaultPad, "read this much before a pass so windows straddling its start are seen whole")
	maxSpan := fs.Duration("max-span", detect.DefaultMaxSpan, "the longest range one pass covers: a longer one (the first pass's --since, the gap an outage of the store left) is caught up in passes of at most this, oldest first")
	perEndpoint := fs.Bool("per-endpoint", true, "also find spike windows per endpoint, from the requests table: a stall of one endpoint's dependency that the host's per-second figures dilute with its other endpoints' requests")
	maxEndpoints := fs.Int("max-endpoints", detect.DefaultMaxEndpoints, "endpoints of a service judged on their own per pass, those with the most requests; the others are counted (spikehunt_detect_endpoints_dropped_total), so routes with ids in them cost a count each")
	minDeviation := fs.Float64("min-deviation", detect.DefaultMinDeviation, "robust deviation a counter needs to be a suspect")
	maxSuspects := fs.Int("max-suspects", detect.DefaultMaxSuspects, "suspects kept per spike window")
	migrate := fs.Bool("migrate", false, "apply the schema migrations first (single node)")
	listen := fs.String("listen", "", "address for /metrics, /healthz and /livez, e.g. :9466 (empty: none); /healthz (readiness) fails when three passes are overdue, /livez (liveness) only when a pass has run 30 minutes or none was tried for three intervals")
	limits := observabilityLimits()
	limitFlags(fs, &limits)
	instance := fs.String("instance", cli.EnvOr("SPIKEHUNT_INSTANCE", ""), "name of this process in the host column of its own counters rows, spikehunt.detect.* (default: the host name; env SPIKEHUNT_INSTANCE)")
	alertBrokers := fs.String("alerts.kafka.brokers", cli.EnvOr("SPIKEHUNT_ALERTS_BROKERS", ""), "publish alerts (new spike-window groups, pattern changes) to Kafka at these brokers; empty: no alerts (env SPIKEHUNT_ALERTS_BROKERS)")
	alertTopic := fs.String("alerts.topic", alerts.DefaultTopic, "topic of the alerts, keyed by service")
	signingKey := fs.String("alerts.signing-key-file", cli.EnvOr("SPIKEHUNT_ALERTS_SIGNING_KEY_FILE", ""), "sign each alert with the key in this file, whose name is the key id (a file of the mounted Secret the operator verifies with, internal/alertdoc/schema.md \"Signatures\"); required with --alerts.kafka.brokers unless --alerts.allow-unsigned (env SPIKEHUNT_ALERTS_SIGNING_KEY_FILE)")
	allowUnsigned := fs.Bool("alerts.allow-unsigned", false, "publish alerts unsigned; an operator refuses them unless it runs with --alerts.allow-unsigned too")
	alertSec := kafkasec.AddFlags(fs, "alerts.kafka.", kafkasec.Config{})
	alertState := fs.String("alerts.state", "", "file that keeps what was alerted across restarts (default: rebuilt from the detector tables at start)")
	var alertCfg alerts.Config
	fs.Float64Var(&alertCfg.SpikeGroupsPerMinute, "alerts.spike-groups-per-minute", alerts.DefaultSpikeGroupsPerMinute, "spike-group alerts a service earns per minute; the windows of held-back ones go out in its next")
	fs.IntVar(&alertCfg.SpikeGroupBurst, "alerts.spike-group-burst", alerts.DefaultSpikeGroupBurst, "spike-group alerts a service may send at once")
	fs.DurationVar(&alertCfg.PatternChangeEvery, "alerts.pattern-change-every", alerts.DefaultPatternChangeEvery, "at most one \"changed\" alert per pattern this often")
	fs.DurationVar(&alertCfg.ResolveAfter, "alerts.resolve-after", 0, "a published pattern resolves once missing from the passes this long (0: the first pass without it)")
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
	if err := alertCfg.Validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return cli.ErrUsage
	}
	if err := alertSec.Config().Validate(); err != nil {
		fmt.Fprintf(stderr, "--alerts.kafka.tls.*, --alerts.kafka.sasl.*: %v\n", err)
		return cli.ErrUsage
	}
	if *alertBrokers != "" && *signingKey == "" && !*allowUnsigned {
		fmt.Fprintln(stderr, "--alerts.kafka.brokers needs --alerts.signing-key-file (the operator refuses unsigned alerts), or --alerts.allow-unsigned")
		return cli.ErrUsage
	}
	cfg := detect.Config{
		Service:   *service,
		Spikes:    detect.SpikeConfig{K: *k, Floor: *floor, FalsePerHostHour: *falsePerHostHour, MergeGap: *gap, Bucket: *bucket, Pad: *pad},
		Endpoints: detect.EndpointConfig{Off: !*perEndpoint, MaxEndpoints: *maxEndpoints},
		Suspects:  detect.SuspectConfig{MinDeviation: *minDeviation, Max: *maxSuspects},
		Patterns:  detect.PatternConfig{Lookback: *lookback},
		MaxSpan:   *maxSpan,
	}
	var err error
	if cfg.From, cfg.To, _, err = rng.Resolve(time.Now().UTC().Truncate(time.Second)); err != nil {
		fmt.Fprintln(stderr, err)
		return cli.ErrUsage
	}
	if err := cfg.Validate(); err != nil {
		if ce := (*detect.ConfigError)(nil); errors.As(err, &ce) {
			fmt.Fprintln(stderr, ce.Problem)
		} else {
			fmt.Fprintln(stderr, err)
		}
		return cli.ErrUsage
	}

	progress := func(format string, a ...any) { fmt.Fprintf(stderr, "detect: "+format+"\n", a...) }
	st, err := store.OpenWaiting(ctx, *dsn, *storeWait, func(err error, left time.Duration) {
		fmt.Fprintf(stderr, "%s: waiting for the store (%v left): %v\n", "detect", left.Round(time.Second), err)
	})
	if err != nil {
		return err
	}
	defer st.Close()
	progress("opened the %s store", st.Backend())
	if *migrate {
		if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
			return err
		}
	}
	what := "every service"
	if *service != "" {
		what = "service " + *service
	}
	progress("%s, first pass %s → %s, look-back %s, every %s", what, cfg.From.UTC().Format(time.RFC3339), cfg.To.UTC().Format(time.RFC3339), cli.FormatDuration(*lookback), cli.FormatDuration(*every))
	var pub *detectsvc.AlertOutbox
	if *alertBrokers != "" {
		var signer *alertsig.Signer
		if *signingKey != "" {
			// Read here, with the other files and connections, not among
			// the flag checks: the key is a mounted Secret.
			key, err := alertsig.LoadKeyFile(*signingKey)
			if err != nil {
				return fmt.Errorf("--alerts.signing-key-file: %w", err)
			}
			if signer, err = alertsig.NewSigner(key); err != nil {
				return fmt.Errorf("--alerts.signing-key-file: %w", err)
			}
		}
		if pub, err = detectsvc.NewAlertOutbox(ctx, st, alertCfg, alerts.KafkaConfig{
			Brokers: strings.Split(*alertBrokers, ","), Topic: *alertTopic, Signer: signer, Security: alertSec.Config(),
		}, *alertState); err != nil {
			return err
		}
		defer pub.Close()
		signed := "unsigned (--alerts.allow-unsigned)"
		if signer != nil {
			signed = "signed with key " + signer.KeyID()
		}
		progress("alerts go to %s on %s (%s), %s", *alertTopic, *alertBrokers, alertSec.Config(), signed)
	}
	health := detectsvc.NewHealth(newRegistry(), *every, time.Now())
	if *listen != "" {
		reg := newRegistry()
		health = detectsvc.NewHealth(reg, *every, time.Now())
		var checks []func() (bool, string)
		if pub != nil {
			reg.MustRegister(pub.Missing())
			checks = append(checks, pub.Health)
		}
		srv, ln, err := listenHTTP(*listen, health.Mux(observabilityMux(reg, st, checks...), time.Now), limits)
		if err != nil {
			return err
		}
		go srv.Serve(ln)
		defer srv.Close()
		progress("metrics and health on http://%s", ln.Addr())
	}
	own := detectsvc.NewPassCounters(st, *instance)
	err = detect.Run(ctx, st, cfg, *every, detect.RunHooks{
		Start: func(time.Time, time.Time) { health.Begin(time.Now()) },
		Pass: func(r detect.Result) {
			health.Observe(r, time.Now())
			fmt.Fprintln(stdout, detectsvc.Summary(r))
			if err := own.Record(ctx, r, time.Now()); err != nil && ctx.Err() == nil {
				progress("%v (retried after the next pass)", err)
			}
			if pub != nil {
				pub.Publish(ctx, r, stdout, stderr)
			}
		},
		Fail: func(err error) {
			health.Failed(time.Now())
			progress("pass failed, tried again after --every (doubling while it fails), from the end of the last pass that succeeded: %v", err)
		},
	})
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
