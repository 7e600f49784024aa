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
	"regexp"
	"strings"
	"sync"
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

// hidden are the flags the usage leaves out: deprecated aliases.
var hidden sync.Map // *flag.Flag → struct{}

// groups are the flags the usage keeps together, by flag set (Group).
var groups sync.Map // *flag.FlagSet → [][]string

// Group keeps the named flags of fs together in the usage, in this order,
// where the first of them sorts: a flag whose help continues another's
// ("--from: … instead of --since") is printed under it. The other flags
// are printed in alphabetical order.
func Group(fs *flag.FlagSet, names ...string) {
	for _, n := range names {
		if fs.Lookup(n) == nil {
			panic("cli.Group: no flag " + n)
		}
	}
	g, _ := groups.Load(fs)
	list, _ := g.([][]string)
	groups.Store(fs, append(list, names))
}

// ordered is fs's flags in the order the usage prints them: alphabetical,
// except that each group (Group) follows its first member.
func ordered(fs *flag.FlagSet) []*flag.Flag {
	g, _ := groups.Load(fs)
	list, _ := g.([][]string)
	follower := map[string]bool{}
	after := map[string][]string{}
	for _, grp := range list {
		for _, n := range grp[1:] {
			follower[n] = true
		}
		after[grp[0]] = append(after[grp[0]], grp[1:]...)
	}
	var out []*flag.Flag
	seen := map[string]bool{}
	var add func(name string)
	add = func(name string) {
		if seen[name] {
			return
		}
		seen[name] = true
		out = append(out, fs.Lookup(name))
		for _, n := range after[name] {
			add(n)
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if !follower[f.Name] {
			add(f.Name)
		}
	})
	fs.VisitAll(func(f *flag.Flag) { add(f.Name) }) // a follower whose first member is another group's follower
	return out
}

// PrintFlags prints fs's flags as flag.PrintDefaults does, but in the
// double-dash form (--dsn string; a one-letter flag keeps one dash, -o),
// with each group (Group) together, and without the hidden ones.
func PrintFlags(fs *flag.FlagSet, w io.Writer) {
	for _, f := range ordered(fs) {
		if _, ok := hidden.Load(f); ok {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "  %s", Dashed(f.Name))
		typ, usage := flag.UnquoteUsage(f)
		if n, ok := f.Value.(interface{ TypeName() string }); ok {
			typ = n.TypeName()
		}
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
	}
}

// Dashed is a flag's name as the usage and the messages write it: --dsn,
// and -o for a one-letter flag, as kubectl writes it.
func Dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
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
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return err
	case err != nil:
		fmt.Fprintln(out, flagMistake(fs, err))
		return ErrUsage
	}
	return nil
}

// The flag package's messages name a flag with one dash.
var (
	unknownFlag = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	dashedFlag  = regexp.MustCompile(`(for flag|for|argument:) -([^\s:]+)`)
)

// flagMistake rewords the flag package's err: the flag with two dashes,
// and for an unknown flag the nearest one fs has.
func flagMistake(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if m := unknownFlag.FindStringSubmatch(msg); m != nil {
		var names []string
		fs.VisitAll(func(f *flag.Flag) {
			if _, ok := hidden.Load(f); !ok {
				names = append(names, f.Name)
			}
		})
		out := "unknown flag " + Dashed(m[1])
		if near := Nearest(m[1], names); near != "" {
			out += "; did you mean " + Dashed(near) + "?"
		}
		return out
	}
	return dashedFlag.ReplaceAllStringFunc(msg, func(s string) string {
		m := dashedFlag.FindStringSubmatch(s)
		return m[1] + " " + Dashed(m[2])
	})
}

// Nearest is the candidate closest to word by edit distance, when it is
// close enough to be a typo (at most a third of its length, at least 1),
// else "".
func Nearest(word string, candidates []string) string {
	best, bestD := "", len(word)/3
	if bestD < 1 {
		bestD = 1
	}
	bestD++
	for _, c := range candidates {
		if d := editDistance(word, c); d < bestD || d == bestD && c < best {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
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
