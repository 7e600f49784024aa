package flagusage

import (
	"bytes"
	"flag"
	"strings"
	"testing"
)

// A hidden flag is neither listed nor suggested; a one-letter flag keeps
// one dash.
func TestHiddenFlagsAreNeitherListedNorSuggested(t *testing.T) {
	var out bytes.Buffer
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(&out)
	fs.String("until", "", "deprecated")
	fs.String("to", "", "end")
	fs.String("o", "table", "output")
	Hide(fs, "until")
	if err := Parse(fs, []string{"--untl", "x"}, func() {}); err == nil || out.String() != "unknown flag --untl\n" {
		t.Errorf("--untl: %v, %q", err, out.String())
	}
	out.Reset()
	Print(fs, &out)
	if got, want := out.String(), "  -o string\n    \toutput (default \"table\")\n  --to string\n    \tend\n"; got != want {
		t.Errorf("usage %q, want %q", got, want)
	}
	if strings.Contains(out.String(), "until") {
		t.Errorf("the hidden flag is listed:\n%s", out.String())
	}
}
