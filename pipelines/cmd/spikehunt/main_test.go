package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/pipelines/lab/sim"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// spikehunt sim takes every parameter as a flag: a 4-host fleet with a
// 7-minute period and 3 s stalls lands in the store as planned, and the
// truth it prints says so.
func TestSimFlagsShapeTheFleet(t *testing.T) {
	st := testenv.ClickHouse(t)
	dsn := "chdb://" + st.Dir() + "?database=" + st.Database()
	code, out, errs := runCLI(t, "sim", "--dsn", dsn, "--hosts", "4", "--duration", "30m", "--period-min", "7m", "--period-max", "7m",
		"--spike-length", "3s", "--jitter", "0.01", "--skew", "1", "--counter-step", "30s", "--truth")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	var truth sim.Truth
	if err := json.Unmarshal([]byte(out), &truth); err != nil {
		t.Fatalf("truth: %v\n%s", err, out)
	}
	// 30 minutes at one stall per 7 per host: 4 or 5 each.
	if n := len(truth.Windows); n < 16 || n > 20 || truth.Period != 7*time.Minute {
		t.Fatalf("%d windows, period %v", n, truth.Period)
	}
	for _, w := range truth.Windows {
		if w.End.Sub(w.Start) != 3*time.Second {
			t.Fatalf("window %+v", w)
		}
	}
	tab, err := store.Select(context.Background(), st, "SELECT uniqExact(host), countIf(max_us > 1000000) > 0 FROM latency_1s")
	if err != nil || tab.Rows[0][0] != "4" || tab.Rows[0][1] != "1" {
		t.Errorf("latency_1s: %v, %v", tab.Rows, err)
	}
}

func TestMigrateTwiceIsANoOp(t *testing.T) {
	// The shared engine: one embedded engine per process, on one directory.
	st := testenv.ClickHouse(t)
	dsn := "chdb://" + st.Dir() + "?database=" + st.Database()
	code, out, errs := runCLI(t, "migrate", "--dsn", dsn)
	if code != 0 || !strings.Contains(out, "applied 0001") {
		t.Fatalf("first migrate: %d %q %q", code, out, errs)
	}
	code, out, _ = runCLI(t, "migrate", "--dsn", dsn)
	if code != 0 || !strings.HasPrefix(out, "schema is up to date") {
		t.Fatalf("second migrate: %d %q", code, out)
	}
}

func TestCommandLineMistakes(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		code     int
		inStderr string
	}{
		{nil, 2, "Usage: spikehunt <command>"},
		{[]string{"frobnicate"}, 2, "spikehunt: unknown command frobnicate\nrun 'spikehunt -h' for the commands\n"},
		{[]string{"spiks"}, 2, "spikehunt: unknown command spiks; did you mean spikes?\nrun 'spikehunt -h' for the commands\n"},
		{[]string{"serve-clickhous"}, 2, "did you mean serve-clickhouse?"},
		{[]string{"migrate"}, 2, "--dsn is required"},
		{[]string{"migrate", "--dsn", "mysql://x"}, 1, "spikehunt migrate: invalid DSN"},
		{[]string{"migrate", "--dsn", "http://127.0.0.1:1/db?dial_timeout=300ms"}, 1, "unreachable"},
		{[]string{"demo", "--hosts", "1"}, 2, "--hosts must be 2–5000"},
		{[]string{"demo", "--scenario", "gremlins"}, 2, `unknown scenario "gremlins"`},
		// The time grammar: --hours takes a duration or a number of hours.
		{[]string{"demo", "--hosts", "1", "--hours", "6h"}, 2, "--hosts must be 2–5000"},
		{[]string{"demo", "--hours", "49h"}, 2, "--hours 30m–48h"},
		{[]string{"demo", "--hours", "soon"}, 2, `invalid value "soon" for flag --hours: want a duration`},
		// sim and eval take --from (--start, eval's --dir: deprecated aliases) and eval --dsn.
		{[]string{"sim", "--dsn", "chdb:///tmp/x", "--from", "yesterday"}, 2, `--from "yesterday": want an RFC 3339 time`},
		{[]string{"sim", "--dsn", "chdb:///tmp/x", "--start", "yesterday"}, 2, "warning: --start is deprecated and will be removed; use --from\n--from \"yesterday\""},
		{[]string{"eval", "--dsn", "http://host:8123/db"}, 2, "eval runs on an embedded store, chdb:///dir"},
		{[]string{"eval", "--dir", "/tmp/x", "--scenarios", "gremlins"}, 2, "warning: --dir is deprecated and will be removed; use --dsn\nunknown scenario"},
		{[]string{"eval", "--start", "soon", "--scenarios", "healthy"}, 2, `--from "soon": want an RFC 3339 time`},
		{[]string{"sim", "--dsn", "chdb:///tmp/x", "--kafka.brokers", "k:9092"}, 2, "give one of --dsn or --kafka.brokers"},
		{[]string{"sim", "--dsn", "chdb:///tmp/x", "--fraction", "2"}, 2, "fraction 2, want [0, 1]"},
		{[]string{"serve-clickhouse", "--dsn", "http://host:8123/db"}, 2, "must name an embedded store"},
		// An open address without credentials: anyone who reaches it would run statements as the store's owner.
		{[]string{"serve-clickhouse", "--dsn", "chdb:///tmp/x", "--listen", "0.0.0.0:8123"}, 2, "not a loopback address: set --user"},
		{[]string{"serve-clickhouse", "--dsn", "chdb:///tmp/x", "--listen", ":8123"}, 2, "not a loopback address: set --user"},
		{[]string{"serve-clickhouse", "--dsn", "chdb:///tmp/x", "--listen", "0.0.0.0:8123", "--user", "ingest", "--password-env", "SPIKEHUNT_TEST_UNSET"}, 2, "has no password: set $SPIKEHUNT_TEST_UNSET"},
		{[]string{"serve-clickhouse", "--dsn", "chdb:///tmp/x", "--user", "a", "--read-only-user", "a"}, 2, "give Grafana a user of its own"},
		{[]string{"demo", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"migrate", "--cluster", "prod", "--print"}, 2, "needs --database"},
		{[]string{"detect", "--dsn", "chdb:///tmp/x", "--alerts.kafka.brokers", "k:9093", "--alerts.allow-unsigned", "--alerts.kafka.sasl.mechanism", "GSSAPI",
			"--alerts.kafka.sasl.username", "u", "--alerts.kafka.sasl.password-file", "/p"}, 2, `unknown SASL mechanism "GSSAPI"`},
		{[]string{"ingest", "--dsn", "chdb:///tmp/x", "--kafka.sasl.password", "hunter2"}, 2, "unknown flag --kafka.sasl.password; did you mean --kafka.sasl.password-file?"},
		{[]string{"sim", "--kafka.brokers", "k:9093", "--kafka.sasl.mechanism", "GSSAPI", "--kafka.sasl.username", "u", "--kafka.sasl.password-file", "/p"}, 2, `unknown SASL mechanism "GSSAPI"`},
		{[]string{"sim", "--kafka.brokers", "k:9093", "--kafka.sasl.password", "hunter2"}, 2, "unknown flag --kafka.sasl.password; did you mean --kafka.sasl.password-file?"},
		{[]string{"sim", "--dsn", "chdb:///tmp/x", "--kafka.tls.enabled"}, 2, "--dsn loads without Kafka"},
	} {
		code, _, errs := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.inStderr) {
			t.Errorf("spikehunt %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errs, tc.code, tc.inStderr)
		}
		if tc.code == 1 && strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Errorf("spikehunt %v: error is not one line: %q", tc.args, errs)
		}
		// A usage mistake is its line and where the help is, never the
		// usage, which would scroll it away.
		if tc.code == 2 && tc.args != nil && (strings.Contains(errs, "Usage:") || strings.Count(errs, "\n") > 3 ||
			!strings.Contains(errs, "run 'spikehunt ")) {
			t.Errorf("spikehunt %v: want the mistake and where the help is, got %q", tc.args, errs)
		}
	}
}

// spikehunt help lists the commands, the query commands among them.
func TestHelpListsTheCaptures(t *testing.T) {
	if code, _, errs := runCLI(t, "help"); code != 0 || !strings.Contains(errs, "captures") {
		t.Errorf("help: exit %d\n%s", code, errs)
	}
}

func TestMigratePrintRendersClusterDDL(t *testing.T) {
	code, out, errs := runCLI(t, "migrate", "--cluster", "prod", "--database", "spikehunt", "--print")
	if code != 0 || !strings.Contains(out, "ON CLUSTER") || !strings.Contains(out, "Distributed(") {
		t.Fatalf("exit %d, stderr %q, out lacks cluster DDL:\n%.400s", code, errs, out)
	}
}
