// Command spikehunt is the platform's CLI: the embedded demo, schema
// migrations, and the ClickHouse HTTP interface over the embedded store.
// Later subcommands (ingest, detect, spikes, patterns, hosts, captures) join
// the same table below.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand: its flags are parsed from args by run itself.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"captures":         {"flight-recorder captures and the spike windows they cover", runCaptures},
	"demo":             {"run the main job on one machine with the embedded ClickHouse engine", runDemo},
	"detect":           {"find spike windows, their suspect kernel counters and fleet patterns, on an interval", runDetect},
	"eval":             {"score the detectors on every simulated scenario (make eval)", runEval},
	"ingest":           {"consume the OTLP Kafka topics into ClickHouse, exactly once", runIngest},
	"hosts":            {"per-host latency and spike counts: one machine or all of them?", runHosts},
	"migrate":          {"apply the ClickHouse schema migrations to a store", runMigrate},
	"patterns":         {"fleet patterns (recurrent, synchronized, isolated) in a sentence each", runPatterns},
	"sim":              {"simulate a fleet (every scenario parameter a flag) into a store or Kafka", runSim},
	"serve-clickhouse": {"serve the ClickHouse HTTP interface over an embedded store", runServeClickHouse},
	"spikes":           {"spike windows per host, with their top suspect", runSpikes},
	"suspects":         {"the kernel counters that moved with each spike window", runSuspects},
	"version":          {"print the version", runVersion},
}

// errUsage marks a command-line mistake: exit status 2, usage already shown.
var errUsage = errors.New("usage")

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
		fmt.Fprintf(stderr, "spikehunt: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	err := cmd.run(ctx, args[1:], stdout, stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintf(stderr, "spikehunt %s: %v\n", args[0], err)
		return 1
	}
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

// newFlags returns a flag set that prints a command's usage and returns
// errUsage on a mistake instead of exiting.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("spikehunt "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: spikehunt %s [flags]\n\n%s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args, mapping a flag mistake to errUsage.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	return nil
}

// envOr returns the environment variable's value, or def.
func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

var version = "dev" // set with -ldflags "-X main.version=…"

func runVersion(_ context.Context, _ []string, stdout, _ io.Writer) error {
	fmt.Fprintln(stdout, "spikehunt", version)
	return nil
}
