package store_test

import (
	"strings"
	"testing"

	"github.com/spikehunt/spikehunt/pipelines/store"
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
