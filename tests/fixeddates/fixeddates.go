// Package fixeddates finds fixed recent dates in the tests that put data
// into the store or onto Kafka. Such a date ages: one day the tables' TTLs
// or the ingest's accepted window drop the data and the test fails for no
// change of code. Test data for the store is dated from
// testenv.RecentDay() (or relative to now, or from the injected clock);
// a date that cannot age out (parsed only, never stored) says so with a
// `// fixed date: <reason>` comment on its line or the line above.
//
// Standard library only.
package fixeddates

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Marker exempts the line it is on, and the line below it.
const Marker = "fixed date:"

// Fix is what an offender is told to do.
const Fix = "date it from testenv.RecentDay()"

var (
	// A year 2020–2099 as time.Date's first argument, or a calendar date
	// in any literal ("2026-11-22T…", '2026-11-22 10:00:00' in SQL).
	goDate   = regexp.MustCompile(`time\.Date\(\s*20[2-9][0-9]\b|\b20[2-9][0-9]-[01][0-9]-[0-3][0-9]`)
	fileDate = regexp.MustCompile(`\b20[2-9][0-9]-[01][0-9]-[0-3][0-9]`)

	// usesStore matches a test file that puts data into the store or onto
	// Kafka, or runs a command against an embedded store.
	usesStore = regexp.MustCompile(`testenv\.(ClickHouse|SharedKafka|StartKafka|SharedSecureKafka)\(` +
		`|\bschema\.Apply\(|\bsim\.Load\(` +
		`|"github\.com/spikehunt/spikehunt/pipelines/(store|ingest)"` +
		`|chdb://`)
)

// Offender is one fixed date without a marker.
type Offender struct {
	File string // relative to the scanned root, slash-separated
	Line int
	Text string // the line, trimmed
}

func (o Offender) String() string {
	return fmt.Sprintf("%s:%d: fixed date in a test of the store or Kafka: %s (or mark why it cannot age out: // %s <reason>): %s",
		o.File, o.Line, Fix, Marker, o.Text)
}

// Scan walks root (a module's directory) and returns, sorted, every fixed
// date in the _test.go files of a package whose tests use the store or
// Kafka, and in the files under that package's testdata/ unless a line of
// its tests that names the file carries the marker.
func Scan(root string) ([]Offender, error) {
	var out []Offender
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor" || name == "node_modules") {
			return filepath.SkipDir
		}
		found, err := scanPackage(root, path)
		out = append(out, found...)
		return err
	})
	slices.SortFunc(out, func(a, b Offender) int {
		if c := strings.Compare(a.File, b.File); c != 0 {
			return c
		}
		return a.Line - b.Line
	})
	return out, err
}

type testFile struct {
	rel   string
	lines []string
}

func scanPackage(root, dir string) ([]Offender, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []testFile
	store := false
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		store = store || usesStore.Match(b)
		files = append(files, testFile{rel: rel(root, filepath.Join(dir, e.Name())), lines: splitLines(b)})
	}
	if !store {
		return nil, nil
	}
	var out []Offender
	for _, f := range files {
		out = append(out, offenders(f.rel, f.lines, goDate)...)
	}
	td := filepath.Join(dir, "testdata")
	if fi, err := os.Stat(td); err != nil || !fi.IsDir() {
		return out, nil
	}
	err = filepath.WalkDir(td, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if marked(files, d.Name()) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.IndexByte(b, 0) >= 0 { // binary
			return nil
		}
		out = append(out, offenders(rel(root, path), splitLines(b), fileDate)...)
		return nil
	})
	return out, err
}

// offenders are the lines matching re with no marker on them or above.
func offenders(file string, lines []string, re *regexp.Regexp) []Offender {
	var out []Offender
	for i, l := range lines {
		if !re.MatchString(l) || strings.Contains(l, Marker) || (i > 0 && strings.Contains(lines[i-1], Marker)) {
			continue
		}
		text := strings.TrimSpace(l)
		if len(text) > 120 {
			text = text[:117] + "..."
		}
		out = append(out, Offender{File: file, Line: i + 1, Text: text})
	}
	return out
}

// marked reports whether a line of files that names the testdata file
// base (in quotes) carries the marker, on it or the line above.
func marked(files []testFile, base string) bool {
	q := `"` + base + `"`
	for _, f := range files {
		for i, l := range f.lines {
			if strings.Contains(l, q) && (strings.Contains(l, Marker) || (i > 0 && strings.Contains(f.lines[i-1], Marker))) {
				return true
			}
		}
	}
	return false
}

func splitLines(b []byte) []string {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

func rel(root, path string) string {
	r, err := filepath.Rel(root, path)
	if err != nil {
		return filepath.ToSlash(path)
	}
	return filepath.ToSlash(r)
}
