package ftrace

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/capture/explain"
)

// On a real device: direct, synced writes to a file on the disk under the
// test's folder are each issued and completed; the default profile's
// analysis pairs them per device with their latencies.
func TestFtraceAnalysisGivesTheDevicesIssueToCompleteLatencies(t *testing.T) {
	b := ftraceForTest(t)
	dir := t.TempDir()
	// The file goes on a disk, not a tmpfs: the working directory's.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(wd, fmt.Sprintf(".blockio-%d", os.Getpid()))
	defer os.Remove(path)
	var st unix.Stat_t
	if err := unix.Stat(wd, &st); err != nil {
		t.Fatal(err)
	}
	dev := fmt.Sprintf("%d,%d", unix.Major(st.Dev), unix.Minor(st.Dev))

	rec, err := b.New(capture.Spec{ID: "blockio", Backend: capture.Ftrace, Pre: 5 * time.Second, Post: time.Second}, dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rec.Arm(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Disarm() })
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|unix.O_DIRECT|unix.O_DSYNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	// O_DIRECT wants a block-aligned buffer: an anonymous mapping is.
	buf, err := unix.Mmap(-1, 0, 64<<10, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	const writes = 32
	for i := 0; i < writes; i++ {
		if _, err := f.WriteAt(buf, int64(i)*int64(len(buf))); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	if err := rec.Fire(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := rec.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rec.(capture.Analyzer).Analyze(ctx, capture.AnalysisInput{Metadata: &record.Metadata{Lost: res.Lost, Overruns: res.Overruns}}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, ExplainFile))
	if err != nil {
		t.Fatal(err)
	}
	var a explain.Analysis
	if err := json.Unmarshal(raw, &a); err != nil || a.BlockIO == nil {
		t.Fatalf("explain.json: %v\n%s", err, raw)
	}
	t.Logf("verdict: %s; devices %+v", a.Findings.Verdict, a.BlockIO.Devices)
	var found *explain.DeviceIO
	for i, d := range a.BlockIO.Devices {
		if d.Dev == dev {
			found = &a.BlockIO.Devices[i]
		}
	}
	if found == nil {
		t.Fatalf("no requests on %s (the working directory's device) among %+v", dev, a.BlockIO.Devices)
	}
	if found.IOs < writes/2 || found.MaxNS == 0 || found.MaxNS > uint64(30*time.Second) || found.TotalNS < found.MaxNS {
		t.Errorf("%s: %+v, want ≥ %d requests with latencies", dev, found, writes/2)
	}
}
