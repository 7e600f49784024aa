// Package flagusage is how every spikehunt binary (spikehunt,
// spikehunt-agent, spikehunt-operator) prints its flags and its flag
// mistakes, over the standard library's flag package: flags in the
// double-dash form the README writes (--dsn; a one-letter flag keeps one
// dash, -o), a flag whose help continues another's kept under it (Group),
// deprecated aliases hidden (Hide), and a mistake in one line that names
// its flag the same way, with the nearest flag for a typo. It imports the
// standard library only.
package flagusage

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
)

var (
	hidden sync.Map // *flag.Flag → struct{}
	groups sync.Map // *flag.FlagSet → [][]string
)

// Hide leaves the flag name of fs out of the usage and out of the
// suggestions for a mistyped flag: a deprecated alias.
func Hide(fs *flag.FlagSet, name string) {
	f := fs.Lookup(name)
	if f == nil {
		panic("flagusage.Hide: no flag " + name)
	}
	hidden.Store(f, struct{}{})
}

// Group keeps the named flags of fs together in the usage, in this order,
// where the first of them sorts: a flag whose help continues another's
// ("--from: … instead of --since") is printed under it. The other flags
// are printed in alphabetical order.
func Group(fs *flag.FlagSet, names ...string) {
	for _, n := range names {
		if fs.Lookup(n) == nil {
			panic("flagusage.Group: no flag " + n)
		}
	}
	g, _ := groups.Load(fs)
	list, _ := g.([][]string)
	groups.Store(fs, append(list, names))
}

// ordered is fs's flags in the order the usage prints them: alphabetical,
// except that each group follows its first member.
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
	fs.VisitAll(func(f *flag.Flag) { add(f.Name) }) // a follower whose first member follows another group
	return out
}

// Print prints fs's flags as flag.PrintDefaults does, but in the
// double-dash form, with each group together, and without the hidden ones.
// A flag.Value with a TypeName method names its own type.
func Print(fs *flag.FlagSet, w io.Writer) {
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

// Parse parses args into fs. On -h it calls usage and returns
// flag.ErrHelp; on a mistake it prints the mistake in one line on fs's
// output (Mistake) and returns the flag package's error. The flag
// package's own printing (the error, then the whole usage, which scrolls
// the error away) is off.
func Parse(fs *flag.FlagSet, args []string, usage func()) error {
	u, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = u
	fs.SetOutput(out)
	switch {
	case errors.Is(err, flag.ErrHelp):
		usage()
	case err != nil:
		fmt.Fprintln(out, Mistake(fs, err))
	}
	return err
}

// The flag package's messages name a flag with one dash.
var (
	unknownFlag = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	dashedFlag  = regexp.MustCompile(`(for flag|for|argument:) -([^\s:]+)`)
)

// Mistake rewords err, an error of fs.Parse: the flag with two dashes
// ("flag needs an argument: --dsn"), and for an unknown flag the nearest
// one fs has ("unknown flag --sinc; did you mean --since?").
func Mistake(fs *flag.FlagSet, err error) string {
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
	best, bestD := "", max(len(word)/3, 1)+1
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
