package main

import (
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// A dependency of /checkout stalls 1 s every 15–20 min on every host of a
// storefront of four endpoints at 8 requests per second per host (sim's
// endpoint-stall): through sim → ingest → detect → patterns on the real
// engine, the pattern's sentence names /checkout as the endpoint that
// stalls and the three others as unaffected, at night too.
func TestThePatternSentenceNamesTheOneEndpointThatStallsAndTheOthersUnaffected(t *testing.T) {
	st := testenv.ClickHouse(t)
	dsn := "chdb://" + st.Dir() + "?database=" + st.Database()
	// 02:00–04:00 UTC yesterday, whatever the hour the test runs at: the
	// simulated load's low, when a quarter of the stalls catch no request
	// of /checkout.
	start := time.Now().UTC().Truncate(24 * time.Hour).Add(-24*time.Hour + 2*time.Hour)
	end := start.Add(2 * time.Hour)
	if code, _, errs := runCLI(t, "sim", "--dsn", dsn, "--scenario", "endpoint-stall", "--hosts", "40",
		"--duration", "2h", "--from", start.Format(time.RFC3339), "--counter-step", "30s"); code != 0 {
		t.Fatalf("sim: exit %d\n%s", code, errs)
	}
	rng := []string{"--from", start.Format(time.RFC3339), "--to", end.Format(time.RFC3339)}
	if code, _, errs := runCLI(t, append([]string{"detect", "--dsn", dsn, "--service", "storefront", "--every", "0"}, rng...)...); code != 0 {
		t.Fatalf("detect: exit %d\n%s", code, errs)
	}
	code, out, errs := runCLI(t, append([]string{"patterns", "--dsn", dsn, "--service", "storefront"}, rng...)...)
	if code != 0 {
		t.Fatalf("patterns: exit %d\n%s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	sentence := lines[len(lines)-1]
	t.Log(sentence)
	_, clause, ok := strings.Cut(sentence, "; stalls on /checkout only; ")
	if !ok {
		t.Fatalf("the sentence does not say the stalls are on /checkout only:\n%s", out)
	}
	unaffected, _, ok := strings.Cut(clause, " unaffected")
	if !ok {
		t.Fatalf("the sentence names no unaffected endpoint:\n%s", sentence)
	}
	for _, e := range []string{"/search", "/feed", "/profile"} {
		if !strings.Contains(unaffected, e) {
			t.Errorf("unaffected endpoints %q, want %s among them", unaffected, e)
		}
	}
	if strings.Count(sentence, "/checkout") != 1 {
		t.Errorf("the sentence names /checkout more than once:\n%s", sentence)
	}
}
