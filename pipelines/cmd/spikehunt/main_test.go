package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// The demo is the main job: it must show the stalling host, and a re-run
// must load nothing twice.
func TestDemoShowsTheStallingHostAndIsIdempotent(t *testing.T) {
	dsn := "chdb://" + t.TempDir() + "?database=demo"
	for run := 1; run <= 2; run++ {
		code, out, errs := runCLI(t, "demo", "--dsn", dsn, "--hosts", "4", "--minutes", "2")
		if code != 0 {
			t.Fatalf("run %d: exit %d\n%s", run, code, errs)
		}
		if !strings.Contains(errs, "migrating the schema") || !strings.Contains(errs, "loaded 9600 rows") {
			t.Fatalf("run %d: progress missing:\n%s", run, errs)
		}
		// 4 hosts × 120 s × 20 req/s: 2400 requests each, never 4800.
		rows := regexp.MustCompile(`(?m)^\s+demo-\d{3}\s+gen\d\s+(\d+)\s+\S+\s+\S+\s+(\S+)\s+(\d+)\s*$`).FindAllStringSubmatch(out, -1)
		if len(rows) != 4 {
			t.Fatalf("run %d: want 4 host rows:\n%s", run, out)
		}
		for i, r := range rows {
			if r[1] != "2400" {
				t.Fatalf("run %d: host %d has %s requests, want 2400 (a re-run must not duplicate)", run, i, r[1])
			}
			slow := "0"
			if i == 3 {
				slow = "1"
			}
			if r[3] != slow {
				t.Fatalf("run %d: host %d has %s slow seconds, want %s:\n%s", run, i, r[3], slow, out)
			}
		}
	}
}

func TestMigrateTwiceIsANoOp(t *testing.T) {
	dsn := "chdb://" + t.TempDir() + "?database=m"
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
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"migrate"}, 2, "--dsn is required"},
		{[]string{"migrate", "--dsn", "mysql://x"}, 1, "spikehunt migrate: invalid DSN"},
		{[]string{"migrate", "--dsn", "http://127.0.0.1:1/db?dial_timeout=300ms"}, 1, "unreachable"},
		{[]string{"demo", "--hosts", "1"}, 2, "--hosts must be 2–1000"},
		{[]string{"serve-clickhouse", "--dsn", "http://host:8123/db"}, 2, "must name an embedded store"},
		{[]string{"demo", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"migrate", "--cluster", "prod", "--print"}, 2, "needs --database"},
	} {
		code, _, errs := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.inStderr) {
			t.Errorf("spikehunt %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errs, tc.code, tc.inStderr)
		}
		if tc.code == 1 && strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Errorf("spikehunt %v: error is not one line: %q", tc.args, errs)
		}
	}
}

func TestMigratePrintRendersClusterDDL(t *testing.T) {
	code, out, errs := runCLI(t, "migrate", "--cluster", "prod", "--database", "spikehunt", "--print")
	if code != 0 || !strings.Contains(out, "ON CLUSTER") || !strings.Contains(out, "Distributed(") {
		t.Fatalf("exit %d, stderr %q, out lacks cluster DDL:\n%.400s", code, errs, out)
	}
}
