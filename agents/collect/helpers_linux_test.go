package collect

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/tests/fakeclock"
)

// newFakeClock is the collector's clock in the tests: it moves only when
// told, and its times carry no monotonic reading, so intervals are plain
// wall-clock differences.
func newFakeClock() *fakeclock.Clock {
	return fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
}

// fixtureEthtool serves `ethtool -S` dumps from <dir>/<iface>.
type fixtureEthtool struct{ dir string }

func (f fixtureEthtool) Stats(iface string) ([]string, []uint64, error) {
	b, err := os.ReadFile(filepath.Join(f.dir, iface))
	if err != nil {
		return nil, nil, readError(filepath.Join(f.dir, iface), err)
	}
	m, err := parseEthtoolDump(b)
	if err != nil {
		return nil, nil, err
	}
	return m.names, m.values, nil
}

type ethtoolDump struct {
	names  []string
	values []uint64
}

// parseEthtoolDump reads the output of `ethtool -S`.
func parseEthtoolDump(b []byte) (ethtoolDump, error) {
	var d ethtoolDump
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasSuffix(line, "statistics:") {
			continue
		}
		name, val, ok := strings.Cut(line, ":")
		v, err := strconv.ParseUint(strings.TrimSpace(val), 10, 64)
		if !ok || err != nil {
			return d, fmt.Errorf("ethtool dump line %q", line)
		}
		d.names = append(d.names, name)
		d.values = append(d.values, v)
	}
	return d, sc.Err()
}

// stage copies testdata/<fixture>/<step> onto root, replacing files.
func stage(t *testing.T, root, fixture string, step int) {
	t.Helper()
	src := filepath.Join("testdata", fixture, strconv.Itoa(step))
	if step < 0 {
		src = filepath.Join("testdata", fixture)
	}
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		dst := filepath.Join(root, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatalf("stage %s: %v", src, err)
	}
}

// writeFile writes content at root/rel, creating directories.
func writeFile(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// only returns the Disabled list that leaves just the named samplers on.
func only(names ...string) []string {
	var off []string
	for _, n := range knownSamplers {
		if !slices.Contains(names, n) {
			off = append(off, n)
		}
	}
	return off
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newFixtureCollector builds a Collector over root/proc, root/sys,
// root/cgroup and root/ethtool with a fake clock.
func newFixtureCollector(t *testing.T, root string, clock Clock, samplers ...string) *Collector {
	t.Helper()
	c, err := New(Options{
		ProcFS:   filepath.Join(root, "proc"),
		SysFS:    filepath.Join(root, "sys"),
		CgroupFS: filepath.Join(root, "cgroup"),
		Disabled: only(samplers...),
		Clock:    clock,
		Logger:   discardLogger(),
		ethtool:  fixtureEthtool{dir: filepath.Join(root, "ethtool")},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// seriesKey renders a point's identity: metric{k=v,…} in attribute order.
func seriesKey(p telemetry.Point) string {
	var b strings.Builder
	b.WriteString(p.Metric)
	b.WriteByte('{')
	for i, a := range p.Attrs {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%v", a.Key, a.Value)
	}
	b.WriteByte('}')
	return b.String()
}

// rates returns Value / (End − Start) per series of the named metric.
func rates(t *testing.T, pts []telemetry.Point, metric string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, p := range pts {
		if p.Metric != metric {
			continue
		}
		secs := p.End.Sub(p.Start).Seconds()
		if secs <= 0 {
			t.Fatalf("%s: interval %v is not positive", seriesKey(p), p.End.Sub(p.Start))
		}
		if _, dup := out[seriesKey(p)]; dup {
			t.Fatalf("%s emitted twice in one pass", seriesKey(p))
		}
		out[seriesKey(p)] = p.Value / secs
	}
	return out
}

// values returns Value per series of the named metric.
func values(pts []telemetry.Point, metric string) map[string]float64 {
	out := map[string]float64{}
	for _, p := range pts {
		if p.Metric == metric {
			out[seriesKey(p)] = p.Value
		}
	}
	return out
}
