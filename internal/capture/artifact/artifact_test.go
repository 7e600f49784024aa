package artifact_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// writeFiles writes name → content into dir.
func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// newMetadata is a capture record as a recorder fills it before Seal.
func newMetadata(id string, names ...string) *record.Metadata {
	fired := time.Date(2026, 11, 22, 21, 37, 0, 0, time.UTC)
	md := &record.Metadata{
		ID:          id,
		Host:        "node-1",
		Backend:     "perf",
		ArmedAt:     fired.Add(-time.Minute),
		FiredAt:     fired,
		WindowStart: fired.Add(-5 * time.Second),
		WindowEnd:   fired.Add(2 * time.Second),
		Trigger:     record.FireCause{Kind: "latency", Service: "checkout", Latency: 1200 * time.Millisecond},
		Lost:        3,
		Clock:       record.Clock{Name: "CLOCK_MONOTONIC", Offset: 17 * time.Second},
	}
	for _, n := range names {
		md.Files = append(md.Files, record.File{Name: n})
	}
	return md
}

func TestSealPinsEachFileAndTheWholeArtifact(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"perf.data.1":    "first dump",
		"perf.data.2":    "second dump, longer",
		"requests.jsonl": "",
	})
	md := newMetadata("cap-1", "perf.data.2", "perf.data.1", "requests.jsonl")
	md.Requests = "requests.jsonl"
	if err := artifact.Seal(dir, md); err != nil {
		t.Fatal(err)
	}
	want := []record.File{
		{Name: "perf.data.2", Bytes: 19, SHA256: sha("second dump, longer")},
		{Name: "perf.data.1", Bytes: 10, SHA256: sha("first dump")},
		{Name: "requests.jsonl", Bytes: 0, SHA256: sha("")},
	}
	if diff := cmp.Diff(want, md.Files); diff != "" {
		t.Errorf("files, in the recorder's order (-want +got):\n%s", diff)
	}
	if md.Bytes != 29 {
		t.Errorf("Bytes = %d, want 29", md.Bytes)
	}
	// The documented recipe: printf '%s\n' <sha256>... | sha256sum.
	recipe := sha(want[0].SHA256 + "\n" + want[1].SHA256 + "\n" + want[2].SHA256 + "\n")
	if md.Checksum != recipe {
		t.Errorf("Checksum = %s, want %s", md.Checksum, recipe)
	}
	if md.Version != record.MetadataVersion {
		t.Errorf("Version = %d, want %d", md.Version, record.MetadataVersion)
	}
	if err := md.CheckSealed(); err != nil {
		t.Errorf("a sealed record fails CheckSealed: %v", err)
	}
}

func TestSealWithoutFileNamesTakesEveryFileSortedByName(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"b.dat": "b", "a.dat": "a", "c.dat": "c"})
	md := newMetadata("cap-2")
	if err := artifact.Seal(dir, md); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range md.Files {
		names = append(names, f.Name)
	}
	if diff := cmp.Diff([]string{"a.dat", "b.dat", "c.dat"}, names); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
}

func TestSealRefusesWhatIsNotAPlainFileWithAValidName(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "secret")
	writeFiles(t, filepath.Dir(outside), map[string]string{"secret": "not yours"})
	tests := []struct {
		name    string
		prepare func(t *testing.T, dir string)
		files   []string // md.Files' names; nil lists the folder
		mention string
	}{
		{"a symlink to a file outside", func(t *testing.T, dir string) { symlink(t, outside, filepath.Join(dir, "perf.data")) }, []string{"perf.data"}, "symlink"},
		{"a symlink inside the folder", func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{"real": "x"})
			symlink(t, "real", filepath.Join(dir, "perf.data"))
		}, []string{"perf.data"}, "symlink"},
		{"a symlink found by listing the folder", func(t *testing.T, dir string) { symlink(t, outside, filepath.Join(dir, "perf.data")) }, nil, "symlink"},
		{"a folder", func(t *testing.T, dir string) { mkdir(t, filepath.Join(dir, "sub")) }, []string{"sub"}, "folder"},
		{"a folder found by listing", func(t *testing.T, dir string) { mkdir(t, filepath.Join(dir, "sub")) }, nil, "folder"},
		{"a named pipe", func(t *testing.T, dir string) {
			// Reading a pipe would block Seal forever: it must not even be opened.
			if out, err := exec.Command("mkfifo", filepath.Join(dir, "fifo")).CombinedOutput(); err != nil {
				t.Fatalf("mkfifo: %v %s", err, out)
			}
		}, []string{"fifo"}, "named pipe"},
		{"a name with ..", nil, []string{"../secret"}, "file name"},
		{"an absolute name", nil, []string{outside}, "file name"},
		{"a name with a slash", func(t *testing.T, dir string) {
			mkdir(t, filepath.Join(dir, "sub"))
			writeFiles(t, dir, map[string]string{"sub/x": "x"})
		}, []string{"sub/x"}, "file name"},
		{"an upper-case name found by listing", func(t *testing.T, dir string) { writeFiles(t, dir, map[string]string{"Perf.data": "x"}) }, nil, "file name"},
		{"a name listed twice", func(t *testing.T, dir string) { writeFiles(t, dir, map[string]string{"a": "x"}) }, []string{"a", "a"}, "twice"},
		{"a missing file", nil, []string{"gone"}, "gone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.prepare != nil {
				tt.prepare(t, dir)
			}
			md := newMetadata("cap-3", tt.files...)
			before := *md
			err := artifact.Seal(dir, md)
			if err == nil {
				t.Fatalf("Seal succeeded: %+v", md.Files)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("error %q does not mention %q", err, tt.mention)
			}
			if diff := cmp.Diff(before, *md); diff != "" {
				t.Errorf("a failed Seal changed md (-before +after):\n%s", diff)
			}
		})
	}
}

func TestSealWantsTheRequestRecordsAmongTheFiles(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"perf.data": "x"})
	md := newMetadata("cap-4", "perf.data")
	md.Requests = "requests.jsonl"
	if err := artifact.Seal(dir, md); !errors.Is(err, record.ErrInvalid) {
		t.Fatalf("Seal = %v, want ErrInvalid", err)
	}
}

func TestCheckSealedRefusesRecordsThatDoNotAddUp(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a": "aa", "b": "b"})
	good := newMetadata("cap-5", "a", "b")
	if err := artifact.Seal(dir, good); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		change func(md *record.Metadata)
	}{
		{"an unsealed record", func(md *record.Metadata) { md.Files[0].SHA256 = "" }},
		{"an upper-case checksum", func(md *record.Metadata) { md.Files[0].SHA256 = strings.ToUpper(md.Files[0].SHA256) }},
		{"bytes that are not the sum", func(md *record.Metadata) { md.Bytes++ }},
		{"a negative size", func(md *record.Metadata) { md.Files[0].Bytes, md.Bytes = -1, 0 }},
		{"a checksum of other files", func(md *record.Metadata) { md.Files[0], md.Files[1] = md.Files[1], md.Files[0] }},
		{"a version from the future", func(md *record.Metadata) { md.Version = record.MetadataVersion + 1 }},
		{"no version", func(md *record.Metadata) { md.Version = 0 }},
		{"an id with ..", func(md *record.Metadata) { md.ID = "../cap" }},
		{"an id with a slash", func(md *record.Metadata) { md.ID = "a/b" }},
		{"a file name with a slash", func(md *record.Metadata) { md.Files[0].Name = "x/a" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := *good
			md.Files = append([]record.File(nil), good.Files...)
			tt.change(&md)
			if err := md.CheckSealed(); !errors.Is(err, record.ErrInvalid) {
				t.Errorf("CheckSealed = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestDecodeMetadataReadsWhatSealWroteAndRefusesTheRest(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a": "aa"})
	md := newMetadata("cap-6", "a")
	if err := artifact.Seal(dir, md); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(md)
	if err != nil {
		t.Fatal(err)
	}
	got, err := record.DecodeMetadata(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(md, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	withNewField := strings.Replace(string(b), `{"version":1,`, `{"version":1,"added_later":{"x":1},`, 1)
	if _, err := record.DecodeMetadata([]byte(withNewField)); err != nil {
		t.Errorf("a record with a field from a newer build: %v", err)
	}
	for name, bad := range map[string]string{
		"trailing data":   string(b) + `{}`,
		"not JSON":        "perf.data",
		"an id with ..":   strings.Replace(string(b), `"id":"cap-6"`, `"id":"../../etc"`, 1),
		"a file with /":   strings.Replace(string(b), `"name":"a"`, `"name":"/etc/passwd"`, 1),
		"a JSON array":    "[]",
		"an empty record": "{}",
		"too large":       `{"notes":["` + strings.Repeat("x", record.MaxMetadataBytes) + `"]}`,
	} {
		if _, err := record.DecodeMetadata([]byte(bad)); !errors.Is(err, record.ErrInvalid) {
			t.Errorf("%s: DecodeMetadata = %v, want ErrInvalid", name, err)
		}
	}
}

// FuzzDecodeMetadata: records come back from a shared bucket or an editable
// volume. Decoding must never panic, and whatever it accepts must be safe
// to turn into paths and keys and must survive a round trip.
func FuzzDecodeMetadata(f *testing.F) {
	dir := f.TempDir()
	writeFiles(f, dir, map[string]string{"perf.data": "x", "requests.jsonl": "{}\n"})
	md := newMetadata("seed", "perf.data", "requests.jsonl")
	md.Requests = "requests.jsonl"
	if err := artifact.Seal(dir, md); err != nil {
		f.Fatal(err)
	}
	b, _ := json.Marshal(md)
	f.Add(b)
	f.Add([]byte(strings.Replace(string(b), `"id":"seed"`, `"id":"../seed"`, 1)))
	f.Add([]byte(`{"version":1,"id":"x","files":[{"name":"..","bytes":1,"sha256":"00"}]}`))
	f.Add([]byte(`{"version":1,"id":"x","files":null,"bytes":0,"checksum":"` + sha("") + `"}`))
	f.Add([]byte(`{"version":1e400}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		md, err := record.DecodeMetadata(b)
		if err != nil {
			if !errors.Is(err, record.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if record.ValidName("capture id", md.ID) != nil {
			t.Fatalf("accepted id %q", md.ID)
		}
		for _, f := range md.Files {
			if record.ValidName("file name", f.Name) != nil || strings.ContainsAny(f.Name, `/\`) {
				t.Fatalf("accepted file name %q", f.Name)
			}
		}
		again, err := json.Marshal(md)
		if err != nil {
			t.Fatal(err)
		}
		md2, err := record.DecodeMetadata(again)
		if err != nil {
			t.Fatalf("an accepted record does not decode after re-encoding: %v", err)
		}
		if md2.Checksum != md.Checksum || md2.ID != md.ID || len(md2.Files) != len(md.Files) {
			t.Fatalf("round trip changed the record: %+v → %+v", md, md2)
		}
	})
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}
