package testenv

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spikehunt/spikehunt/internal/store"
)

// The embedded engine is one per process and bound to one data directory,
// and booting it costs about a second: the test binary keeps one engine on a
// temporary directory, held open by a keeper store, and each test gets a
// database of its own on it.
var chEngine struct {
	dir    string
	keeper *store.Embedded
	err    error
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// ClickHouse returns an embedded store on a fresh database named after the
// test, in the test binary's shared engine. The store is closed when the
// test ends; the database is dropped first so that its data does not add up
// over a run. StopShared shuts the engine down and removes its directory.
func ClickHouse(t testing.TB) *store.Embedded {
	t.Helper()
	if sharedStopped() {
		t.Fatal("testenv: ClickHouse called after StopShared")
	}
	shared.chOnce.Do(func() {
		dir, err := os.MkdirTemp("", "spikehunt-clickhouse-")
		if err != nil {
			chEngine.err = fmt.Errorf("testenv: engine directory: %w", err)
			return
		}
		chEngine.dir = dir
		chEngine.keeper, chEngine.err = store.OpenEmbedded(context.Background(), store.EmbeddedConfig{Dir: dir, Connections: 1})
	})
	if chEngine.err != nil {
		t.Fatal(chEngine.err)
	}
	db := "t_" + strings.Trim(nonIdent.ReplaceAllString(strings.ToLower(t.Name()), "_"), "_")
	if len(db) > 120 {
		db = db[:120]
	}
	ctx := context.Background()
	if err := chEngine.keeper.Exec(ctx, "DROP DATABASE IF EXISTS "+store.QuoteIdent(db)+" SYNC"); err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenEmbedded(ctx, store.EmbeddedConfig{Dir: chEngine.dir, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.Close()
		if !t.Failed() {
			_ = chEngine.keeper.Exec(context.Background(), "DROP DATABASE IF EXISTS "+store.QuoteIdent(db)+" SYNC")
		}
	})
	return st
}

// ClickHouseDir is the shared engine's data directory ("" before the first
// ClickHouse call): a test that opens stores itself must use this directory.
func ClickHouseDir() string { return chEngine.dir }

func stopClickHouse() {
	if chEngine.keeper != nil {
		chEngine.keeper.Close()
		chEngine.keeper = nil
	}
	if chEngine.dir != "" {
		os.RemoveAll(chEngine.dir)
	}
}
