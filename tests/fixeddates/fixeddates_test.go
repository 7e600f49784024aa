package fixeddates

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// No test that puts data into the store or onto Kafka carries a fixed
// recent date: one day the TTLs or the ingest's window drop its data.
func TestNoFixedDatesInStoreTests(t *testing.T) {
	found, err := Scan(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range found {
		t.Error(o)
	}
}

// The pieces of the planted files are split so that this file neither
// uses the store nor holds a date itself.
const (
	year      = "20" + "26"
	storeCall = "testenv." + "ClickHouse(t)"
)

func plant(t *testing.T, dir, name, text string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestScanReportsUnmarkedDatesInStoreTests(t *testing.T) {
	root := t.TempDir()
	// A package whose tests use the store: a date in one file, one with a
	// marker on its line, one with a marker above, and golden data.
	plant(t, root, "a/store_test.go", "package a\n\nfunc TestA(t *testing.T) {\n\tst := "+storeCall+"\n\t_ = st\n}\n")
	plant(t, root, "a/dates_test.go", "package a\n\nvar t0 = time.Date("+year+", 11, 22, 0, 0, 0, 0, time.UTC)\n"+
		"var t1 = time.Date("+year+", 1, 2, 0, 0, 0, 0, time.UTC) // "+Marker+" parsed only, never stored\n"+
		"// "+Marker+" a flag's validation\n"+
		"var args = []string{\"--from\", \""+year+"-11-22T10:00:00Z\"}\n"+
		"var sql = \"INSERT INTO t VALUES ('"+year+"-11-22 10:00:00')\"\n"+
		"var golden = \"golden.txt\"\n"+
		"var parsed = \"parsed.json\" // "+Marker+" decoded only\n")
	plant(t, root, "a/testdata/golden.txt", "spike at "+year+"-11-22 10:00:00\nno date here\n")
	plant(t, root, "a/testdata/parsed.json", `{"at": "`+year+`-11-22T10:00:00Z"}`+"\n")
	// A package whose tests do not: its dates may stay.
	plant(t, root, "b/parse_test.go", "package b\n\nvar t0 = time.Date("+year+", 11, 22, 0, 0, 0, 0, time.UTC)\n")
	plant(t, root, "b/testdata/in.txt", year+"-11-22\n")
	// Dot folders are not the module's.
	plant(t, root, ".cache/c/x_test.go", storeCall+"\ntime.Date("+year+", 1, 1, 0, 0, 0, 0, time.UTC)\n")

	found, err := Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range found {
		got = append(got, o.File+":"+strconv.Itoa(o.Line))
		if s := o.String(); !strings.Contains(s, Fix) || !strings.HasPrefix(s, o.File+":") {
			t.Errorf("offender %q: want file:line and the fix %q", s, Fix)
		}
	}
	want := []string{"a/dates_test.go:3", "a/dates_test.go:7", "a/testdata/golden.txt:1"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got %v, want %v", got, want)
	}
}
