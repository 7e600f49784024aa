package schema

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spikehunt/spikehunt/internal/store"
)

var allTables = []string{
	"captures", "counters", "host_tail_blocks", "host_tails", "ingest_intents", "latency_1m", "latency_1m_mv", "latency_1s", "latency_1s_mv", "patterns", "requests",
	"schema_migrations", "spike_suspects", "spikes",
}

func TestApplyOnAFreshDatabaseCreatesEveryTableAndASecondApplyChangesNothing(t *testing.T) {
	ctx := context.Background()
	st := openDB(t)
	applied, err := Apply(ctx, st, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for _, m := range Default() {
		want = append(want, m.Version)
	}
	if diff := cmp.Diff(want, applied); diff != "" {
		t.Fatalf("applied versions (-want +got):\n%s", diff)
	}
	tables := queryRows(t, st, "SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name")
	if diff := cmp.Diff(allTables, tables); diff != "" {
		t.Fatalf("tables (-want +got):\n%s", diff)
	}
	recorded := queryRows(t, st, "SELECT version, name, checksum FROM schema_migrations FINAL ORDER BY version")
	var wantRecorded []string
	for _, m := range Default() {
		wantRecorded = append(wantRecorded, fmt.Sprintf("%d\t%s\t%s", m.Version, m.Name, m.Checksum()))
	}
	if diff := cmp.Diff(wantRecorded, recorded); diff != "" {
		t.Fatalf("schema_migrations (-want +got):\n%s", diff)
	}

	snapshot := func() []string {
		return append(queryRows(t, st, "SELECT name, create_table_query FROM system.tables WHERE database = currentDatabase() ORDER BY name"),
			queryRows(t, st, "SELECT version, applied_at FROM schema_migrations ORDER BY version")...)
	}
	before := snapshot()
	again, err := Apply(ctx, st, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 0 {
		t.Fatalf("second Apply applied %v, want nothing", again)
	}
	if diff := cmp.Diff(before, snapshot()); diff != "" {
		t.Fatalf("second Apply changed the database (-before +after):\n%s", diff)
	}
}

func TestApplyRendersTheOptionsIntoTheTables(t *testing.T) {
	ctx := context.Background()
	st := openDB(t)
	other := "t_options_other_db"
	if err := st.Exec(ctx, "DROP DATABASE IF EXISTS "+other+" SYNC"); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(ctx, st, Options{Database: other, RequestsTTLDays: 3, DedupWindow: 50}); err != nil {
		t.Fatal(err)
	}
	got := queryOne(t, st, "SELECT engine_full FROM system.tables WHERE database = '"+other+"' AND name = 'requests'")
	for _, want := range []string{"toIntervalDay(3)", "non_replicated_deduplication_window = 50", "ttl_only_drop_parts = 1"} {
		if !strings.Contains(got, want) {
			t.Errorf("requests engine %q lacks %q", got, want)
		}
	}
	if n := queryOne(t, st, "SELECT count() FROM system.tables WHERE database = currentDatabase()"); n != "0" {
		t.Errorf("the store's own database got %s tables, want none", n)
	}
}

// list is a small migration list whose second migration can be broken.
func list(second string) []Migration {
	return []Migration{
		{Version: 1, Name: "first", Statements: []string{"CREATE TABLE IF NOT EXISTS a (x UInt8) ENGINE = MergeTree ORDER BY x"}},
		{Version: 2, Name: "second", Statements: []string{
			"CREATE TABLE IF NOT EXISTS b (x UInt8) ENGINE = MergeTree ORDER BY x",
			second,
		}},
		{Version: 3, Name: "third", Statements: []string{"CREATE TABLE IF NOT EXISTS d (x UInt8) ENGINE = MergeTree ORDER BY x"}},
	}
}

func recordedVersions(t *testing.T, st *store.Embedded) []string {
	return queryRows(t, st, "SELECT version FROM schema_migrations FINAL ORDER BY version")
}

func TestAFailingMigrationNamesItselfAndARerunAfterTheFixContinuesFromIt(t *testing.T) {
	ctx := context.Background()
	st := openDB(t)
	broken := "CREATE TABLE IF NOT EXISTS c (x UInt8)\nENGINE = NoSuchEngine ORDER BY x"
	applied, err := ApplyList(ctx, st, list(broken), Options{})
	if err == nil {
		t.Fatal("ApplyList succeeded with a broken statement")
	}
	t.Log(err)
	if diff := cmp.Diff([]int{1}, applied); diff != "" {
		t.Errorf("applied (-want +got):\n%s", diff)
	}
	msg := err.Error()
	if strings.ContainsAny(msg, "\r\n") {
		t.Errorf("error spans lines: %q", msg)
	}
	for _, want := range []string{"migration 2 second", "statement 2 (CREATE TABLE IF NOT EXISTS c (x UInt8))", "re-run"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	var me *MigrationError
	if !errors.As(err, &me) || me.Version != 2 || me.Statement != 2 {
		t.Errorf("error %#v, want a *MigrationError for version 2, statement 2", err)
	}
	var ex *store.Exception
	if !errors.As(err, &ex) {
		t.Errorf("error does not wrap the engine's exception: %#v", err)
	}
	if diff := cmp.Diff([]string{"1"}, recordedVersions(t, st)); diff != "" {
		t.Fatalf("recorded versions after the failure (-want +got):\n%s", diff)
	}

	fixed := list("CREATE TABLE IF NOT EXISTS c (x UInt8) ENGINE = MergeTree ORDER BY x")
	applied, err = ApplyList(ctx, st, fixed, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{2, 3}, applied); diff != "" {
		t.Errorf("applied after the fix (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"1", "2", "3"}, recordedVersions(t, st)); diff != "" {
		t.Errorf("recorded versions after the fix (-want +got):\n%s", diff)
	}
}

func TestApplyRefusesADatabaseThatDisagreesWithTheList(t *testing.T) {
	ok := "CREATE TABLE IF NOT EXISTS c (x UInt8) ENGINE = MergeTree ORDER BY x"
	edited := list(ok)
	edited[0].Statements[0] = "CREATE TABLE IF NOT EXISTS a (x UInt16) ENGINE = MergeTree ORDER BY x"
	reformatted := list(ok)
	reformatted[0].Statements[0] = "-- a comment\nCREATE TABLE IF NOT EXISTS a\n  (x UInt8)\nENGINE = MergeTree ORDER BY x"
	renumbered := func(versions ...int) []Migration {
		l := list(ok)
		for i, v := range versions {
			l[i].Version = v
		}
		return l
	}
	tests := []struct {
		name        string
		first, next []Migration
		wantErr     error
		wantMsg     string
	}{
		{"an edited applied migration is drift", list(ok), edited, ErrDrift,
			"migration 1 first was applied with checksum"},
		{"whitespace and comments are not drift", list(ok), reformatted, nil, ""},
		{"a version the build does not know", list(ok), list(ok)[:2], ErrUnknownVersion,
			"has migration 3 third, which this build does not know"},
		{"a pending version below an applied one", renumbered(10, 20, 30)[:2], renumbered(10, 15, 20), ErrOutOfOrder,
			"migration 15 second is pending but version 20 is already applied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			st := openDB(t)
			if _, err := ApplyList(ctx, st, tt.first, Options{}); err != nil {
				t.Fatal(err)
			}
			before := recordedVersions(t, st)
			applied, err := ApplyList(ctx, st, tt.next, Options{})
			if !errors.Is(err, tt.wantErr) || (err != nil && !strings.Contains(err.Error(), tt.wantMsg)) {
				t.Fatalf("error %v, want %v containing %q", err, tt.wantErr, tt.wantMsg)
			}
			if err == nil {
				return
			}
			t.Log(err)
			if len(applied) != 0 {
				t.Errorf("applied %v despite the error", applied)
			}
			if diff := cmp.Diff(before, recordedVersions(t, st)); diff != "" {
				t.Errorf("recorded versions changed (-before +after):\n%s", diff)
			}
		})
	}
}

func TestApplyListRejectsAMalformedList(t *testing.T) {
	ok := []string{"SELECT 1"}
	tests := []struct {
		name string
		list []Migration
	}{
		{"versions not increasing", []Migration{{Version: 2, Name: "a", Statements: ok}, {Version: 2, Name: "b", Statements: ok}}},
		{"version zero", []Migration{{Version: 0, Name: "a", Statements: ok}}},
		{"no name", []Migration{{Version: 1, Statements: ok}}},
		{"no statements", []Migration{{Version: 1, Name: "a"}}},
		{"a template that does not parse", []Migration{{Version: 1, Name: "a", Statements: []string{"SELECT {{.Nope"}}}},
		{"a template naming an unknown field", []Migration{{Version: 1, Name: "a", Statements: []string{"SELECT {{.Nope}}"}}}},
	}
	st := openDB(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ApplyList(context.Background(), st, tt.list, Options{}); err == nil {
				t.Fatal("ApplyList accepted it")
			} else {
				t.Log(err)
			}
		})
	}
	if n := queryOne(t, st, "SELECT count() FROM system.tables WHERE database = currentDatabase()"); n != "0" {
		t.Errorf("a rejected list created %s tables", n)
	}
}
