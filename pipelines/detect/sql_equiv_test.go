package detect

import (
	"strings"
	"testing"
)

// TestTemplatedStatementsRenderTheSameSQLAsTheNumberedVerbs renders every
// templated statement both ways for the same configurations.
func TestTemplatedStatementsRenderTheSameSQLAsTheNumberedVerbs(t *testing.T) {
	old := sqlCases(oldSpikeWindowsSQL, oldSuspectsSQL, oldAveragedIllusionSQL)
	tmpl := sqlCases(spikeWindowsSQL, suspectsSQL, averagedIllusionSQL)
	if len(old) != len(tmpl) {
		t.Fatalf("%d old statements, %d templated", len(old), len(tmpl))
	}
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	for i := range old {
		if norm(old[i].sql) != norm(tmpl[i].sql) {
			t.Errorf("%s differs:\nold: %s\nnew: %s", old[i].name, old[i].sql, tmpl[i].sql)
			continue
		}
		if old[i].sql != tmpl[i].sql {
			t.Logf("%s: the same up to whitespace", old[i].name)
		}
	}
}
