// Package cli is what every spikehunt subcommand shares: its flag set, the
// usage mistake that exits 2, the one-line error that exits 1, and the one
// time grammar of --since/--from/--to (timerange.go).
//
// The flag grammar is the standard library's flag package: -x and --x are
// the same flag, --x=v and --x v the same value; the usage prints the
// double-dash form, as the README writes it. A CLI library (cobra, kong)
// would add nested commands and completion spikehunt does not need, and a
// dependency to every binary that imports this package. The
// command table and the wiring stay in pipelines/cmd/spikehunt; the
// commands themselves live there or in pipelines/cli/query and
// pipelines/lab/demo. It imports only the standard library.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
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
		PrintFlags(fs, stderr)
	}
	return fs
}

// hidden are the flags the usage leaves out: deprecated aliases.
var hidden sync.Map // *flag.Flag → struct{}

// PrintFlags prints fs's flags as flag.PrintDefaults does, but in the
// double-dash form (--dsn string; a one-letter flag keeps one dash, -o)
// and without the hidden ones.
func PrintFlags(fs *flag.FlagSet, w io.Writer) {
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := hidden.Load(f); ok {
			return
		}
		var b strings.Builder
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-" // -o, as kubectl writes it
		}
		fmt.Fprintf(&b, "  %s%s", dash, f.Name)
		typ, usage := flag.UnquoteUsage(f)
		if typ != "" {
			b.WriteString(" " + typ)
		}
		b.WriteString("\n    \t")
		b.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
		switch {
		case f.DefValue == "", f.DefValue == "false", f.DefValue == "0", f.DefValue == "0s":
		case typ == "string":
			fmt.Fprintf(&b, " (default %q)", f.DefValue)
		default:
			fmt.Fprintf(&b, " (default %v)", f.DefValue)
		}
		fmt.Fprintln(w, b.String())
	})
}

// Deprecate defines old as a hidden alias of the flag current: a value
// given to --old goes to --current, with a warning on fs's output. The
// usage shows only --current.
func Deprecate(fs *flag.FlagSet, old, current string) {
	target := fs.Lookup(current)
	if target == nil {
		panic("cli.Deprecate: no flag " + current)
	}
	fs.Var(&alias{target: target, old: old, w: fs.Output()}, old, "deprecated: use --"+current)
	hidden.Store(fs.Lookup(old), struct{}{})
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
