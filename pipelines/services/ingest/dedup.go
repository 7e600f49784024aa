package ingest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
)

// Exactly-once rests on ClickHouse dropping a retried block whose
// insert_deduplication_token it has seen (intent.go). A MergeTree table
// remembers only its last N blocks (non_replicated_deduplication_window;
// replicated_deduplication_window and …_seconds for a Replicated one): a
// retry that comes after N other blocks went into the table is inserted
// again. So the window must hold every block that may go into the table
// between a batch's first insert and its last retry.
//
// That gap is bounded by the ingester's own limits. A member inserts what
// it polled only within its lease (Config.Lease) and then stops (fenced);
// a crashed or evicted member's partition moves after the session timeout
// at most (a rebalance its blocking would otherwise prolong is bounded by
// the lease); its new owner re-forms the batch within the catch-up delay
// and retries within its own lease. Hence the horizon
//
//	2 × lease + session timeout + catch-up delay
//
// during which each partition of the topic closes at most one batch per
// --batch.delay while caught up (faster only while its batches fill up
// before that, catching up on a backlog: raise the window if that lasts),
// and a batch makes up to blocksPerBatch blocks. Into counters, each
// member also writes its own counters every ReportEvery.
const blocksPerBatch = 4 // a block is a part per day it spans: live rows cross one midnight at most (2); ×2 for a batch split in halves (flush.go)

// dedupNeed is how many blocks a table fed by a topic of partitions
// partitions must remember, and the horizon it was derived from.
func dedupNeed(cfg *Config, partitions int32, selfReports bool) (blocks int64, horizon time.Duration) {
	horizon = 2*cfg.Lease() + cfg.SessionTimeout + cfg.CatchUpDelay
	perPartition := int64(math.Ceil(float64(horizon) / float64(cfg.MaxDelay)))
	blocks = int64(partitions) * perPartition * blocksPerBatch
	if selfReports {
		blocks += int64(partitions) * int64(math.Ceil(float64(horizon)/float64(cfg.ReportEvery)))
	}
	return blocks, horizon
}

// tableFacts is what the start-up check reads of a destination table.
type tableFacts struct {
	name       string // as created: requests, or requests_local in a cluster
	replicated bool
	window     int64 // blocks remembered; -1: the server's default applies
	seconds    int64 // replicated only: how long; -1: the server's default
	ttl        time.Duration
}

var (
	settingRe = regexp.MustCompile(`\b(non_replicated_deduplication_window|replicated_deduplication_window|replicated_deduplication_window_seconds)\s*=\s*(\d+)`)
	ttlRe     = regexp.MustCompile(`\bTTL\s+[\w.]+\s*\+\s*toInterval(Day|Hour|Week|Month)\((\d+)\)`)
)

// parseTableFacts reads a table's engine and its engine_full text as
// system.tables has them.
func parseTableFacts(name, engine, engineFull string) tableFacts {
	f := tableFacts{name: name, replicated: strings.HasPrefix(engine, "Replicated"), window: -1, seconds: -1}
	for _, m := range settingRe.FindAllStringSubmatch(engineFull, -1) {
		n, _ := strconv.ParseInt(m[2], 10, 64)
		switch {
		case m[1] == "replicated_deduplication_window_seconds":
			f.seconds = n
		case (m[1] == "replicated_deduplication_window") == f.replicated:
			f.window = n
		}
	}
	if m := ttlRe.FindStringSubmatch(engineFull); m != nil {
		n, _ := strconv.Atoi(m[2])
		unit := map[string]time.Duration{"Hour": time.Hour, "Day": 24 * time.Hour, "Week": 7 * 24 * time.Hour, "Month": 31 * 24 * time.Hour}[m[1]]
		f.ttl = time.Duration(n) * unit
	}
	return f
}

// errTablesMissing: the destination tables are not there (yet).
var errTablesMissing = errors.New("ingest: the destination tables do not exist: run `spikehunt migrate`")

// readTables reads the destination tables' facts, by plain name, and the
// server's default deduplication settings.
func readTables(ctx context.Context, st store.Store) (map[string]tableFacts, map[string]int64, error) {
	names := []string{"requests", "counters", "latency_1s", "latency_1m"}
	var quoted []string
	for _, n := range names {
		quoted = append(quoted, store.QuoteString(n), store.QuoteString(n+"_local"))
	}
	t, err := store.Select(ctx, st, "SELECT name, engine, engine_full FROM system.tables WHERE database = currentDatabase() AND engine LIKE '%MergeTree' AND name IN ("+strings.Join(quoted, ", ")+")")
	if err != nil {
		return nil, nil, err
	}
	facts := map[string]tableFacts{}
	for _, r := range t.Rows {
		facts[strings.TrimSuffix(r[0], "_local")] = parseTableFacts(r[0], r[1], r[2])
	}
	if _, ok := facts["requests"]; !ok {
		return nil, nil, errTablesMissing
	}
	if _, ok := facts["counters"]; !ok {
		return nil, nil, errTablesMissing
	}
	d, err := store.Select(ctx, st, "SELECT name, value FROM system.merge_tree_settings WHERE name IN ('non_replicated_deduplication_window', 'replicated_deduplication_window', 'replicated_deduplication_window_seconds')")
	if err != nil {
		return nil, nil, err
	}
	defaults := map[string]int64{}
	for _, r := range d.Rows {
		defaults[r[0]], _ = strconv.ParseInt(strings.TrimSpace(r[1]), 10, 64)
	}
	return facts, defaults, nil
}

// checkDedup returns an error that says how to fix it when a table's
// window is smaller than dedupNeed for the topic feeding it.
func checkDedup(cfg *Config, facts map[string]tableFacts, defaults map[string]int64, parts map[string]int32) error {
	var problems []string
	for _, dest := range []struct {
		table, topic string
		self         bool
	}{
		{"requests", cfg.SpansTopic, false}, {"latency_1s", cfg.SpansTopic, false}, {"latency_1m", cfg.SpansTopic, false},
		{"counters", cfg.MetricsTopic, true},
	} {
		f, ok := facts[dest.table]
		if !ok {
			continue
		}
		need, horizon := dedupNeed(cfg, parts[dest.topic], dest.self)
		setting := "non_replicated_deduplication_window"
		if f.replicated {
			setting = "replicated_deduplication_window"
		}
		have := f.window
		if have < 0 {
			have = defaults[setting]
		}
		onCluster := ""
		if f.replicated {
			onCluster = " ON CLUSTER <cluster>"
		}
		if have < need {
			problems = append(problems, fmt.Sprintf("table %s remembers the last %d insert blocks (%s), and this ingester needs %d: "+
				"%d partitions of %s × one batch per --batch.delay %s over %s (2 × lease %s + --kafka.session-timeout %s + catch-up delay %s) × %d blocks per batch; "+
				"fix: ALTER TABLE %s%s MODIFY SETTING %s = %d",
				f.name, have, setting, need, parts[dest.topic], dest.topic, cfg.MaxDelay, horizon.Round(time.Second), cfg.Lease().Round(time.Second),
				cfg.SessionTimeout, cfg.CatchUpDelay, blocksPerBatch, f.name, onCluster, setting, need))
		}
		if f.replicated {
			secs := f.seconds
			if secs < 0 {
				secs = defaults["replicated_deduplication_window_seconds"]
			}
			if time.Duration(secs)*time.Second < horizon {
				problems = append(problems, fmt.Sprintf("table %s remembers insert blocks for %ds (replicated_deduplication_window_seconds), and a retry may come %s later; fix: ALTER TABLE %s%s MODIFY SETTING replicated_deduplication_window_seconds = %d",
					f.name, secs, horizon.Round(time.Second), f.name, onCluster, int64(math.Ceil(horizon.Seconds()))))
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w:\n  %s\n(or raise --batch.delay, or lower --kafka.session-timeout / --kafka.rebalance-timeout; --unsafe.skip-dedup-check starts anyway, without exactly-once across crashes and rebalances)",
			ErrDedupWindowTooSmall, strings.Join(problems, "\n  "))
	}
	return nil
}

// ErrDedupWindowTooSmall: a destination table forgets insert blocks
// sooner than the ingester may retry one (see dedupNeed).
var ErrDedupWindowTooSmall = errors.New("ingest: exactly-once is not guaranteed: a table's deduplication window is smaller than this ingester's retries need")

// prepare runs before the first poll: the source's dead-letter topic, the
// tables' TTLs (the default time window) and their deduplication windows.
// ClickHouse out of reach or the tables not migrated yet are waited for;
// a window too small, or a dead-letter topic that cannot be created, is
// an error: the ingester must not start.
func (in *Ingester) prepare(ctx context.Context) error {
	in.health.setStarting("starting: checking the dead-letter topic " + in.cfg.DLQTopic)
	parts, err := in.src.Prepare(ctx)
	if err != nil {
		return err
	}
	for _, t := range []string{in.cfg.SpansTopic, in.cfg.MetricsTopic} {
		_, ok := parts[t]
		in.setMissing(t, parts != nil && !ok)
	}
	in.health.setStarting("starting: reading the tables' TTL and deduplication settings")
	var facts map[string]tableFacts
	var defaults map[string]int64
	for wait := time.Duration(0); ; wait = backoff(wait) {
		if facts, defaults, err = readTables(ctx, in.st); err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		in.log.Warn("ingest: cannot read the destination tables yet; retrying", "err", err)
		in.health.setStarting("starting: " + err.Error())
		sleep(ctx, backoff(wait))
	}
	for topic, table := range map[string]string{in.cfg.SpansTopic: "requests", in.cfg.MetricsTopic: "counters"} {
		switch {
		case in.cfg.MaxAge != 0:
			in.maxAge[topic] = in.cfg.MaxAge
		case facts[table].ttl == 0: // no TTL
			in.maxAge[topic] = MaxAgeLimit
		default:
			in.maxAge[topic] = min(facts[table].ttl, MaxAgeLimit)
		}
	}
	if parts != nil && !in.cfg.SkipDedupCheck {
		if err := checkDedup(&in.cfg, facts, defaults, parts); err != nil {
			return err
		}
	}
	in.tables, in.tableDefaults = facts, defaults
	in.health.setStarting("")
	return nil
}

// adopt starts consuming the source topics that have come to exist since
// the start, each after the deduplication check the start would have run
// on it: a window too small for its partitions ends Run, as it would
// have stopped the start.
func (in *Ingester) adopt() error {
	for topic, n := range in.src.Appeared() {
		if !in.cfg.SkipDedupCheck {
			if err := checkDedup(&in.cfg, in.tables, in.tableDefaults, map[string]int32{topic: n}); err != nil {
				return fmt.Errorf("source topic %s appeared: %w", topic, err)
			}
		}
		in.log.Info("ingest: source topic appeared; consuming it", "topic", topic, "partitions", n)
		in.setMissing(topic, false)
		in.src.Start(topic)
	}
	return nil
}

// setMissing records whether a source topic is missing, for /healthz and
// /metrics.
func (in *Ingester) setMissing(topic string, missing bool) {
	v := 0.0
	if missing {
		v = 1
	}
	in.m.missing.WithLabelValues(topic).Set(v)
	in.health.topicMissing(topic, missing)
}
