package schema

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/spikehunt/spikehunt/internal/store"
)

// clusterStatements is everything Apply would run against cluster "fleet".
func clusterStatements(t *testing.T, database string) []string {
	t.Helper()
	opts := Options{Database: database, Cluster: "fleet"}
	list, err := Render(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	stmts := bootstrap(opts)
	for _, m := range list {
		stmts = append(stmts, m.Statements...)
	}
	return stmts
}

// The embedded engine has no cluster and no Keeper, so it cannot run the
// cluster DDL; it can parse every statement.
func TestEveryClusterStatementParses(t *testing.T) {
	st := openDB(t)
	for _, s := range clusterStatements(t, "spikehunt") {
		if got := queryOne(t, st, "SELECT formatQuery("+store.QuoteString(s)+") != ''"); got != "1" {
			t.Errorf("formatQuery(%s) = %s", firstLine(s), got)
		}
		if !strings.HasPrefix(s, "CREATE ") {
			continue
		}
		if !strings.Contains(firstLine(s), " ON CLUSTER 'fleet'") {
			t.Errorf("%s: no ON CLUSTER on its first line", firstLine(s))
		}
		if m := regexp.MustCompile(`ENGINE = (\w+)`).FindStringSubmatch(s); m != nil &&
			!strings.HasPrefix(m[1], "Replicated") && m[1] != "Distributed" {
			t.Errorf("%s: engine %s is neither replicated nor distributed", firstLine(s), m[1])
		}
	}
}

// localStandIns turns cluster DDL into DDL one server can run: no ON
// CLUSTER, Replicated engines without their Keeper arguments, and a Merge
// table over <table>_local in place of each Distributed table.
func localStandIns(s string) string {
	s = strings.ReplaceAll(s, " ON CLUSTER 'fleet'", "")
	s = regexp.MustCompile(`Replicated(\w*MergeTree)\('[^']*', '\{replica\}'(, )?`).ReplaceAllString(s, "${1}(")
	return regexp.MustCompile(`Distributed\('fleet', (\w+), (\w+), .*\)`).ReplaceAllString(s, "Merge($1, '^$2$$')")
}

// With the cluster parts swapped for local stand-ins, the cluster rendering
// builds a working schema: the plain names read what the local tables
// store, and the view rolls up requests_local into latency_1s_local.
func TestTheClusterRenderingWiresLocalAndDistributedTables(t *testing.T) {
	ctx := context.Background()
	st := openDB(t)
	for _, s := range clusterStatements(t, queryOne(t, st, "SELECT currentDatabase()")) {
		s = localStandIns(s)
		if err := st.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	b := newRequestBatch()
	b.add(10, "h1", "gen9", t0, 1000, 3)
	if err := st.Insert(ctx, "requests_local", b.input()); err != nil {
		t.Fatal(err)
	}
	got := queryOne(t, st, "SELECT (SELECT count() FROM requests), (SELECT sum(weighted_count) FROM latency_1s)")
	if got != "10\t30" {
		t.Errorf("requests rows, latency_1s weighted count read through the plain names = %q, want 10, 30", got)
	}
}
