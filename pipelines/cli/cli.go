// Package cli is what every spikehunt subcommand shares: its flag set, the
// usage mistake that exits 2, the one-line error that exits 1, and the one
// time grammar of --since/--from/--to (timerange.go).
//
// The flag grammar is the standard library's flag package: -x and --x are
// the same flag, --x=v and --x v the same value; the usage prints the
// double-dash form, as the README writes it, through internal/flagusage,
// which spikehunt-agent and spikehunt-operator print theirs with too. A CLI library (cobra, kong)
// would add nested commands and completion spikehunt does not need, and a
// dependency to every binary that imports this package. The
// command table and the wiring stay in pipelines/cmd/spikehunt; the
// commands themselves live there or in pipelines/cli/query and
// pipelines/lab/demo. It imports only the standard library and
// internal/flagusage.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/spikehunt/spikehunt/internal/flagusage"
)

// ErrUsage marks a command-line mistake: exit status 2. The mistake is
// already printed, in one line; ExitCode adds the line that says where the
// help is, so that the mistake does not scroll away under the usage.
var ErrUsage = errors.New("usage")

// NewFlags returns a flag set that prints a command's usage on -h and
// returns ErrUsage on a mistake instead of exiting.
func NewFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("spikehunt "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: spikehunt %s [flags]\n\n%s\n\nFlags:\n", name, synopsis)
		PrintFlags(fs, stderr)
	}
	return fs
}

// Group keeps the named flags of fs together in the usage, in this order,
// where the first of them sorts: a flag whose help continues another's
// ("--from: … instead of --since") is printed under it. The other flags
// are printed in alphabetical order.
func Group(fs *flag.FlagSet, names ...string) { flagusage.Group(fs, names...) }

// PrintFlags prints fs's flags as flag.PrintDefaults does, but in the
// double-dash form (--dsn string; a one-letter flag keeps one dash, -o),
// with each group (Group) together, and without the hidden ones: as
// spikehunt-agent and spikehunt-operator print theirs (internal/flagusage).
func PrintFlags(fs *flag.FlagSet, w io.Writer) { flagusage.Print(fs, w) }

// Nearest is the candidate closest to word by edit distance, when it is
// close enough to be a typo, else "".
func Nearest(word string, candidates []string) string { return flagusage.Nearest(word, candidates) }

// Deprecate defines old as a hidden alias of the flag current: a value
// given to --old goes to --current, with a warning on fs's output. The
// usage shows only --current.
func Deprecate(fs *flag.FlagSet, old, current string) {
	target := fs.Lookup(current)
	if target == nil {
		panic("cli.Deprecate: no flag " + current)
	}
	fs.Var(&alias{target: target, old: old, w: fs.Output()}, old, "deprecated: use --"+current)
	flagusage.Hide(fs, old)
}

// alias is a deprecated flag's value: it sets its target's.
type alias struct {
	target *flag.Flag
	old    string
	w      io.Writer
}

func (a *alias) String() string {
	if a == nil || a.target == nil {
		return ""
	}
	return a.target.Value.String()
}

func (a *alias) Set(s string) error {
	fmt.Fprintf(a.w, "warning: --%s is deprecated and will be removed; use --%s\n", a.old, a.target.Name)
	return a.target.Value.Set(s)
}

// Parse parses args. A mistake is printed as one line, its flags named
// with two dashes ("unknown flag --sinc; did you mean --since?"), and
// returned as ErrUsage; -h prints the usage and returns flag.ErrHelp.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected argument %q (flags come as --name value)\n", fs.Arg(0))
		return ErrUsage
	}
	return nil
}

// ParseFlags is Parse for a command that takes arguments too: the ones
// after the flags are left in fs.Args().
func ParseFlags(fs *flag.FlagSet, args []string) error {
	acceptDays(fs)
	err := flagusage.Parse(fs, args, fs.Usage)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		return ErrUsage
	}
	return err
}

// ExitCode is the exit status of command name after it returned err: 0
// for success and for -h; 2 for a usage mistake, already printed, under
// which it says where the help is; and 1 for any other error, which it
// prints as one line on stderr.
func ExitCode(name string, err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrUsage):
		fmt.Fprintf(stderr, "run 'spikehunt %s -h' for help\n", name)
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
