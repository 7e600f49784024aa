package walls

import (
	"bytes"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxRoomLines is the most non-test lines a package holds before its doc
// must say why it is one package (CONTRIBUTING.md, "Rooms that fit in a
// head").
const maxRoomLines = 3000

// roomSizeReason starts the package doc's paragraph that says why a
// large package stays one.
const roomSizeReason = "Why one package:"

// roomSizes counts the non-test Go lines of each package folder under
// root, and returns each folder's package doc (the doc comments of its
// files' package clauses, joined).
func roomSizes(t *testing.T, root string) (lines map[string]int, docs map[string]string) {
	t.Helper()
	lines, docs = map[string]int{}, map[string]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		lines[dir] += bytes.Count(b, []byte("\n"))
		f, err := parser.ParseFile(fset, path, b, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		if f.Doc != nil {
			docs[dir] += f.Doc.Text()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return lines, docs
}

// No package is over maxRoomLines non-test lines unless its doc says why
// it is one package.
func TestEveryLargeRoomSaysWhyItIsOne(t *testing.T) {
	lines, docs := roomSizes(t, "../..")
	var large []string
	for dir, n := range lines {
		if n > maxRoomLines {
			large = append(large, dir)
		}
	}
	sort.Strings(large)
	for _, dir := range large {
		if !strings.Contains(docs[dir], roomSizeReason) {
			t.Errorf("%s holds %d non-test lines (over %d): split it, or say in its package doc, in a paragraph starting %q, why it is one package",
				dir, lines[dir], maxRoomLines, roomSizeReason)
		}
	}
	if len(lines) < 50 {
		t.Fatalf("counted %d package folders; want the module's", len(lines))
	}
}

// The check sees a planted large package without a reason, and accepts
// one with.
func TestALargeRoomWithoutAReasonIsReported(t *testing.T) {
	root := t.TempDir()
	body := strings.Repeat("var _ = 1\n", maxRoomLines+1)
	write := func(dir, doc string) {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		src := doc + "package big\n\n" + body
		if err := os.WriteFile(filepath.Join(root, dir, "big.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("silent", "// Package big is big.\n")
	write("explained", "// Package big is big.\n//\n// "+roomSizeReason+" its parts share one state.\n")
	lines, docs := roomSizes(t, root)
	if lines["silent"] <= maxRoomLines || strings.Contains(docs["silent"], roomSizeReason) {
		t.Errorf("silent: %d lines, doc %q: want it reported", lines["silent"], docs["silent"])
	}
	if !strings.Contains(docs["explained"], roomSizeReason) {
		t.Errorf("explained: doc %q: want the reason seen", docs["explained"])
	}
}
