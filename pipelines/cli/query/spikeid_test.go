package query

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/internal/store"
)

// The spikes table shows each window's id, 12 characters as git shows a
// commit (longer where two shown ids share those), and suspects --spike and
// captures --spike take a unique prefix of it: an ambiguous one is an error
// that lists the ids it starts, an unknown one an error that says so.
func TestSpikesShowTheirIDAndSpikeTakesAUniquePrefix(t *testing.T) {
	f := seedQueryFleet(t)
	ctx := context.Background()
	st, err := store.Open(ctx, f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Ids as the detector writes them (16 hex characters of a cityHash64),
	// two of them alike in their first 13.
	ids := map[string]time.Duration{"3fa5c0de12ab9e01": 70 * time.Minute, "3fa5c0de12ab97ff": 80 * time.Minute, "9b1f00aa2e4c7d10": 90 * time.Minute}
	var spikes, suspects []string
	for id, at := range ids {
		spikes = append(spikes, fmt.Sprintf("('%s', 'billy', 'h02', 'gen4', '%s', '%s', 800000, 5000, 30, 'v1', now64(3), 0)", id, f.at(at), f.at(at+time.Second)))
		suspects = append(suspects, fmt.Sprintf("('%s', 'billy', 'h02', '%s', 1, 'spikehunt.softirqs', 3, '', 'NET_RX', 10, 900, 40, 'v1', now64(3))", id, f.at(at)))
	}
	for _, q := range []string{
		`INSERT INTO spikes (spike_id, service, host, hw_class, window_start, window_end, peak_us, baseline_us, score,
			detector_version, detected_at, is_deleted) VALUES ` + strings.Join(spikes, ", "),
		`INSERT INTO spike_suspects (spike_id, service, host, window_start, rank, metric, cpu, device, mode, baseline,
			during, deviation, detector_version, detected_at) VALUES ` + strings.Join(suspects, ", "),
	} {
		if err := st.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}

	out, _ := cli(t, 0, append([]string{"spikes", "--dsn", f.dsn, "--host", "h02"}, f.rangeArgs()...)...)
	var shown []string
	for _, r := range tableRows(out, `[0-9a-f]{12,}`) {
		shown = append(shown, r[0])
	}
	if diff := cmp.Diff([]string{"9b1f00aa2e4c", "3fa5c0de12ab97", "3fa5c0de12ab9e"}, shown); diff != "" {
		t.Errorf("SPIKE column, newest first (-want +got):\n%s\n%s", diff, out)
	}
	if !strings.HasPrefix(out, "SPIKE ") {
		t.Errorf("the table's first column is not SPIKE:\n%s", out)
	}

	for _, cmd := range []string{"suspects", "captures"} {
		t.Run(cmd+" --spike", func(t *testing.T) {
			out, _ := cli(t, 0, cmd, "--dsn", f.dsn, "--spike", "9b1f00aa2e4c")
			want := map[string]string{"suspects": "NET_RX", "captures": "no captures of spike 9b1f00aa2e4c7d10 (billy on h02 at "}[cmd]
			if !strings.Contains(out, want) {
				t.Errorf("a 12-character prefix: want %q in:\n%s", want, out)
			}
			_, errs := cli(t, 1, cmd, "--dsn", f.dsn, "--spike", "3fa5c0de12ab")
			if !strings.Contains(errs, `ambiguous spike id "3fa5c0de12ab": 2 spike windows' ids start with it: 3fa5c0de12ab97ff, 3fa5c0de12ab9e01`) {
				t.Errorf("an ambiguous prefix: %q", errs)
			}
			_, errs = cli(t, 1, cmd, "--dsn", f.dsn, "--spike", "ffff")
			if !strings.Contains(errs, `unknown spike id "ffff"`) {
				t.Errorf("an unknown prefix: %q", errs)
			}
		})
	}
}
