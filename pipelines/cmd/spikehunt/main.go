// Command spikehunt is the platform's CLI. This package keeps the command
// table, the dispatch and the wiring, and the commands of the pipeline's
// processes (ingest, detect, migrate, serve-clickhouse, sim, eval); the
// query commands live in pipelines/cli/query and the demo in
// pipelines/lab/demo, on the flag plumbing of pipelines/cli.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/spikehunt/spikehunt/internal/buildinfo"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/pipelines/cli"
	"github.com/spikehunt/spikehunt/pipelines/cli/artifacts"
	"github.com/spikehunt/spikehunt/pipelines/cli/query"
	"github.com/spikehunt/spikehunt/pipelines/lab/demo"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
	"github.com/spikehunt/spikehunt/pipelines/services/detectsvc"
)

// command is one subcommand: its flags are parsed from args by run itself.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"captures":         {"flight-recorder captures and the spike windows they cover; captures get|explain ID", runCaptures},
	"demo":             {"run the main job on one machine with the embedded ClickHouse engine", demo.Command{RecordPass: recordDemoPass}.Run},
	"detect":           {"find spike windows, their suspect kernel counters and fleet patterns, on an interval", runDetect},
	"eval":             {"score the detectors on every simulated scenario (make eval)", runEval},
	"ingest":           {"consume the OTLP Kafka topics into ClickHouse, exactly once", runIngest},
	"hosts":            {"per-host latency and spike counts: one machine or all of them?", query.Hosts},
	"migrate":          {"apply the ClickHouse schema migrations to a store", runMigrate},
	"patterns":         {"fleet patterns (recurrent, synchronized, isolated) in a sentence each", query.Patterns},
	"sim":              {"simulate a fleet (every scenario parameter a flag) into a store or Kafka", runSim},
	"serve-clickhouse": {"serve the ClickHouse HTTP interface over an embedded store", runServeClickHouse},
	"spikes":           {"spike windows per host, with their top suspect", query.Spikes},
	"suspects":         {"the kernel counters that moved with each spike window", query.Suspects},
	"version":          {"print the version", runVersion},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		// One line and where the help is: the list of commands would
		// scroll the mistake away.
		names := make([]string, 0, len(commands))
		for n := range commands {
			names = append(names, n)
		}
		msg := "unknown command " + args[0]
		if near := cli.Nearest(args[0], names); near != "" {
			msg += "; did you mean " + near + "?"
		}
		fmt.Fprintf(stderr, "spikehunt: %s\nrun 'spikehunt -h' for the commands\n", msg)
		return 2
	}
	name := args[0]
	if name == "captures" && len(args) > 1 && (args[1] == "get" || args[1] == "explain") {
		name += " " + args[1]
	}
	return cli.ExitCode(name, cmd.run(ctx, args[1:], stdout, stderr), stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "spikehunt finds latency spikes that recur across a fleet, explains them with kernel counters, and catches them in circular captures.")
	fmt.Fprintln(w, "\nUsage: spikehunt <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-17s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'spikehunt <command> -h' for its flags.")
	fmt.Fprintln(w, "\nStores are named by DSN: chdb:///path/to/dir (embedded engine), clickhouse://user:pass@host:9000/db, http(s)://host:8123/db.")
}

// recordDemoPass writes the demo's detector pass's own figures as
// `spikehunt detect` writes a pass's (detectsvc.PassCounters).
func recordDemoPass(ctx context.Context, st store.Store, res detect.Result) error {
	return detectsvc.NewPassCounters(st, "").Record(ctx, res, time.Now())
}

var version = "dev" // set with -ldflags "-X main.version=…"

func runVersion(_ context.Context, _ []string, stdout, _ io.Writer) error {
	fmt.Fprintln(stdout, "spikehunt", buildinfo.Describe(version))
	return nil
}

// runCaptures is `spikehunt captures`, the query, and its verbs `captures
// get`, which fetches one capture's files, and `captures explain`, which
// prints the agent's analysis of one.
func runCaptures(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "get" {
		return artifacts.Get(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "explain" {
		return artifacts.Explain(ctx, args[1:], stdout, stderr)
	}
	return query.Captures(ctx, args, stdout, stderr)
}
