// Package cli is what every spikehunt subcommand shares: its flag set, the
// usage mistake that exits 2, and the one-line error that exits 1. The
// command table and the wiring stay in pipelines/cmd/spikehunt; the
// commands themselves live there or in pipelines/cli/query and
// pipelines/cli/demo. It imports only the standard library.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// ErrUsage marks a command-line mistake: exit status 2, usage already shown.
var ErrUsage = errors.New("usage")

// NewFlags returns a flag set that prints a command's usage and returns
// ErrUsage on a mistake instead of exiting.
func NewFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("spikehunt "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: spikehunt %s [flags]\n\n%s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// Parse parses args, mapping a flag mistake to ErrUsage.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return ErrUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return ErrUsage
	}
	return nil
}

// ExitCode is the exit status of command name after it returned err: 0
// for success and for -h, 2 for a usage mistake (already shown), and 1
// for any other error, which it prints as one line on stderr.
func ExitCode(name string, err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrUsage):
		return 2
	default:
		fmt.Fprintf(stderr, "spikehunt %s: %v\n", name, err)
		return 1
	}
}

// EnvOr returns the environment variable's value, or def.
func EnvOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
