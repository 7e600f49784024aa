package store_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spikehunt/spikehunt/internal/store"
)

// Validate judges a config as OpenEmbedded would run it and changes
// nothing in it: defaults are WithDefaults' job, on a copy.
func TestEmbeddedConfigValidateLeavesTheConfigAsItWas(t *testing.T) {
	for _, tc := range []struct {
		in      store.EmbeddedConfig
		wantErr string
	}{
		{store.EmbeddedConfig{Dir: "/d"}, ""},
		{store.EmbeddedConfig{}, "empty data directory"},
		{store.EmbeddedConfig{Dir: "/d", Database: "a-b"}, "invalid database name"},
		{store.EmbeddedConfig{Dir: "/d", Connections: 65}, "connections = 65"},
	} {
		got := tc.in
		err := got.Validate()
		if got != tc.in {
			t.Errorf("Validate changed %+v into %+v", tc.in, got)
		}
		if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%+v: Validate = %v, want %q", tc.in, err, tc.wantErr)
		}
	}
	if d := (store.EmbeddedConfig{Dir: "/d"}).WithDefaults(); d.Database != "default" || d.Connections != 4 {
		t.Errorf("WithDefaults = %+v, want database default and 4 connections", d)
	}
}

// A reader's open (RequireTable) checks the data directory before the
// engine boots: a missing store is ErrNoStore, and nothing is created.
func TestOpenEmbeddedRequiringATableCreatesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "typo")
	_, err := store.OpenEmbedded(context.Background(), store.EmbeddedConfig{Dir: dir, Database: "demo", RequireTable: "schema_migrations"})
	var no *store.NoStoreError
	if !errors.Is(err, store.ErrNoStore) || !errors.As(err, &no) || no.Dir != dir || no.Database != "demo" || no.Table != "schema_migrations" {
		t.Fatalf("err = %v, want a store.NoStoreError for %s, demo.schema_migrations", err, dir)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s exists after the open: %v", dir, err)
	}
}
