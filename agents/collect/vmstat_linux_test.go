package collect

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseVmstat(t *testing.T) {
	counts := func(scan, stall, compact, major, collapse, split uint64) [vmCounters]uint64 {
		return [vmCounters]uint64{scan, stall, compact, major, collapse, split}
	}
	all := [vmCounters]bool{true, true, true, true, true, true}
	tests := []struct {
		name string
		in   string
		want vmstatReading
	}{
		{
			name: "a 4.8+ kernel's node counters, zones of allocstall summed",
			in: "nr_dirty 40204\nnr_writeback 12\nallocstall_dma 0\nallocstall_dma32 1\nallocstall_normal 3\nallocstall_movable 0\n" +
				"pgmajfault 765\npgscan_kswapd 9\npgscan_direct 3100\npgscan_direct_throttle 4\ncompact_stall 2\n" +
				"thp_collapse_alloc 5\nthp_collapse_alloc_failed 1\nthp_split_page 6\nthp_split_page_failed 1\n",
			want: vmstatReading{counts: counts(3100, 4, 2, 765, 5, 6), has: all, dirtyPages: 40204, writebackPages: 12},
		},
		{
			name: "a pre-4.8 kernel's per-zone scans are summed, the throttle count left out",
			in: "nr_dirty 1\nnr_writeback 2\npgscan_direct_dma 1\npgscan_direct_normal 5\npgscan_direct_movable 7\n" +
				"pgscan_direct_throttle 100\nallocstall 3\npgmajfault 4\ncompact_stall 0\n",
			want: vmstatReading{counts: counts(13, 3, 0, 4, 0, 0), has: [vmCounters]bool{true, true, true, true, false, false},
				dirtyPages: 1, writebackPages: 2},
		},
		{
			name: "a field that is not read may hold anything",
			in:   "nr_dirty 1\nnr_writeback 0\npgmajfault 0\npgscan_direct 0\nnr_weird -5 x\n",
			want: vmstatReading{counts: counts(0, 0, 0, 0, 0, 0), has: [vmCounters]bool{true, false, false, true, false, false}, dirtyPages: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseVmstat([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(vmstatReading{})); diff != "" {
				t.Errorf("parseVmstat (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseVmstatRejectsMalformedInput(t *testing.T) {
	for _, tt := range []struct{ name, in string }{
		{"an empty file", ""},
		{"no dirty pages line", "nr_writeback 0\npgmajfault 0\npgscan_direct 0\n"},
		{"no direct reclaim line", "nr_dirty 0\nnr_writeback 0\npgmajfault 0\n"},
		{"a value read that is not a number", "nr_dirty 0\nnr_writeback 0\npgmajfault x\npgscan_direct 0\n"},
		{"a value read that is negative", "nr_dirty -1\nnr_writeback 0\npgmajfault 0\npgscan_direct 0\n"},
		{"zones that add up past 64 bits", "nr_dirty 0\nnr_writeback 0\npgmajfault 0\npgscan_direct_normal 18446744073709551615\npgscan_direct_dma 1\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parseVmstat([]byte(tt.in)); !errors.Is(err, errMalformed) {
				t.Errorf("parseVmstat(%q) error = %v, want errMalformed", tt.in, err)
			}
		})
	}
}

func TestParseVmstatOnRealFile(t *testing.T) {
	b, err := os.ReadFile("testdata/real/proc/vmstat")
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseVmstat(b)
	if err != nil {
		t.Fatal(err)
	}
	want := vmstatReading{has: [vmCounters]bool{true, true, true, true, true, true}, dirtyPages: 40204}
	want.counts[vmMajorFault] = 765
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(vmstatReading{})); diff != "" {
		t.Errorf("parseVmstat(real) (-want +got):\n%s", diff)
	}
}

// Direct reclaim: 3,100 pages scanned by allocating tasks over a 2 s
// interval, and the dirty pages as a level in bytes.
func TestDirectReclaimIsReportedAsARate(t *testing.T) {
	real, err := os.ReadFile("testdata/real/proc/vmstat")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	clock := newFakeClock()
	writeFile(t, root, "proc/vmstat", string(real))
	c := newFixtureCollector(t, root, clock, "vmstat")
	c.Sample()
	clock.Advance(2 * time.Second)
	next := strings.NewReplacer("pgscan_direct 0\n", "pgscan_direct 6200\n", "allocstall_normal 0\n", "allocstall_normal 40\n",
		"pgmajfault 765\n", "pgmajfault 865\n").Replace(string(real))
	writeFile(t, root, "proc/vmstat", next)
	pts := c.Sample()
	got := map[string]float64{}
	for _, m := range []string{"spikehunt.memory.reclaim.scanned", "spikehunt.memory.reclaim.stalls", "spikehunt.memory.major_faults", "spikehunt.memory.compaction.stalls"} {
		for k, v := range rates(t, pts, m) {
			got[k] = v
		}
	}
	want := map[string]float64{
		"spikehunt.memory.reclaim.scanned{}": 3100, "spikehunt.memory.reclaim.stalls{}": 20,
		"spikehunt.memory.major_faults{}": 50, "spikehunt.memory.compaction.stalls{}": 0,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rates (-want +got):\n%s", diff)
	}
	if got := values(pts, "spikehunt.memory.dirty")["spikehunt.memory.dirty{}"]; got != 40204*float64(os.Getpagesize()) {
		t.Errorf("dirty = %v bytes, want 40204 pages", got)
	}
}
