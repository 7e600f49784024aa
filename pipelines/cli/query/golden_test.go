package query

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// goldenDay stands for the fleet's day in the golden files: the fleet is
// dated from testenv.RecentDay(), so that the tables' TTLs keep it.
const goldenDay = "YYYY-MM-DD"

// The query commands' output is an interface: scripts parse the JSON and
// people read the tables. On a fleet with fixed times of day every
// command's table and JSON, stdout and stderr, are byte for byte the golden
// files', with the fleet's day written as goldenDay.
func TestQueryCommandsPrintTheirGoldenOutput(t *testing.T) {
	t0 := testenv.RecentDay().Add(10 * time.Hour)
	day := t0.Format(time.DateOnly)
	f := seedQueryFleetAt(t, t0, "toDateTime64('"+day+" 13:00:00.125', 3, 'UTC')")
	seedCaptures(t, f)
	all := append([]string{"--dsn", f.dsn}, f.rangeArgs()...)
	billy := append(append([]string{}, all...), "--service", "billy")
	args := func(cmd string, base []string, extra ...string) []string {
		return append(append([]string{cmd}, base...), extra...)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int // the exit status
	}{
		{"spikes", args("spikes", billy), 0},
		{"spikes-all-services", args("spikes", all), 0},
		{"spikes-host-limit", args("spikes", billy, "--host", "h03", "--limit", "2"), 0},
		{"spikes-without-captures", args("spikes", billy, "--without-captures"), 0},
		{"spikes-none", args("spikes", billy, "--host", "o1"), 0},
		{"patterns", args("patterns", billy), 0},
		{"patterns-all-services", args("patterns", all), 0},
		{"patterns-host", args("patterns", billy, "--host", "h04"), 0},
		{"patterns-none", args("patterns", all, "--service", "other"), 0},
		{"hosts", args("hosts", billy), 0},
		{"hosts-all-services-limit", args("hosts", all, "--limit", "2"), 0},
		{"hosts-none", args("hosts", all, "--service", "nobody"), 0},
		{"suspects", args("suspects", billy, "--limit", "3"), 0},
		{"suspects-aggregate", args("suspects", billy, "--aggregate"), 0},
		{"suspects-spike", args("suspects", []string{"--dsn", f.dsn}, "--spike", "s-h03-2"), 0},
		{"suspects-spike-prefix", args("suspects", []string{"--dsn", f.dsn}, "--spike", "s-h05"), 0},
		{"suspects-spike-ambiguous", args("suspects", []string{"--dsn", f.dsn}, "--spike", "s-h04"), 1},
		{"suspects-spike-unknown", args("suspects", []string{"--dsn", f.dsn}, "--spike", "nope"), 1},
		{"suspects-none", args("suspects", billy, "--host", "h01"), 0},
		{"captures", args("captures", all), 0},
		{"captures-service-limit", args("captures", all, "--service", "billy", "--limit", "2"), 0},
		{"captures-host", args("captures", all, "--host", "h01"), 0},
		{"captures-spike", args("captures", []string{"--dsn", f.dsn}, "--spike", "s-h03-1"), 0},
		{"captures-spike-none", args("captures", []string{"--dsn", f.dsn}, "--spike", "s-h05-1"), 0},
		{"captures-spike-prefix", args("captures", []string{"--dsn", f.dsn}, "--spike", "s-h03-"), 1},
		{"captures-none", args("captures", all, "--service", "other"), 0},
	} {
		for _, output := range []string{"table", "json"} {
			name := tc.name + "." + output
			t.Run(name, func(t *testing.T) {
				stdout, stderr := cli(t, tc.code, append(tc.args, "-o", output)...)
				got := "$ spikehunt " + strings.Join(goldenArgs(tc.args, f), " ") + " -o " + output + "\n" +
					"--- stdout\n" + stdout + "--- stderr\n" + stderr
				got = strings.ReplaceAll(got, day, goldenDay)
				path := filepath.Join("testdata", "golden", name+".txt")
				if *update {
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run with -update to write it)", err)
				}
				if diff := cmp.Diff(string(want), got); diff != "" {
					t.Errorf("%s (-want +got):\n%s", path, diff)
				}
			})
		}
	}
}

// goldenArgs is args with the test's store replaced by a fixed name, so
// that the golden file's first line does not change with the test database.
func goldenArgs(args []string, f queryFleet) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.ReplaceAll(a, f.dsn, "chdb:///STORE")
	}
	return out
}
