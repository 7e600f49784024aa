package store_test

import (
	"context"
	"os"
	"testing"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestMain(m *testing.M) {
	// Subprocess roles re-run this binary; see process_test.go.
	if role := os.Getenv("SPIKEHUNT_STORE_TEST_ROLE"); role != "" {
		os.Exit(runRole(role))
	}
	code := m.Run()
	testenv.StopShared()
	os.Exit(code)
}

// embedded opens the test binary's engine on a database of the test's own.
func embedded(t testing.TB) *store.Embedded { return testenv.ClickHouse(t) }

// scalar runs a one-value query and returns its value as text.
func scalar(t testing.TB, st store.Store, q string) string {
	t.Helper()
	tab, err := store.Select(context.Background(), st, q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if len(tab.Rows) != 1 || len(tab.Rows[0]) != 1 {
		t.Fatalf("%s: got %d rows, want one value", q, len(tab.Rows))
	}
	return tab.Rows[0][0]
}
