package collect

import (
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/procfs/blockdevice"
)

func TestParseDiskstats(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []diskLine
	}{
		{
			name: "a pre-4.18 line with eleven counters",
			in:   "   8       0 sda 1 2 3 4 5 6 7 8 9 10 11\n",
			want: []diskLine{{name: "sda", stats: [11]uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}},
		},
		{
			name: "discard and flush fields of newer kernels are ignored",
			in:   " 259       0 nvme0n1 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n",
			want: []diskLine{{name: "nvme0n1", stats: [11]uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseDiskstats([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(diskLine{})); diff != "" {
				t.Errorf("parseDiskstats (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseDiskstatsRejectsMalformedInput(t *testing.T) {
	for _, tt := range []struct{ name, in string }{
		{"a 2.6.24 partition line with four counters", "   8    1 sda1 1 2 3 4\n"},
		{"a major number that is not a number", "   x    1 sda 1 2 3 4 5 6 7 8 9 10 11\n"},
		{"no device name", "   8    1\n"},
		{"a counter that is not a number", "   8    0 sda 1 2 3 4 5 6 7 8 9 10 z\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parseDiskstats([]byte(tt.in)); !errors.Is(err, errMalformed) {
				t.Errorf("parseDiskstats(%q) error = %v, want errMalformed", tt.in, err)
			}
		})
	}
}

func TestParseDiskstatsAgreesWithProcfsOnRealFile(t *testing.T) {
	b, err := os.ReadFile("testdata/real/proc/diskstats")
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseDiskstats(b)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := blockdevice.NewFS("testdata/real/proc", "testdata/real/sys")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := fs.ProcDiskstats()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][11]uint64{}
	for _, d := range ref {
		s := d.IOStats
		want[d.DeviceName] = [11]uint64{s.ReadIOs, s.ReadMerges, s.ReadSectors, s.ReadTicks, s.WriteIOs, s.WriteMerges,
			s.WriteSectors, s.WriteTicks, s.IOsInProgress, s.IOsTotalTicks, s.WeightedIOTicks}
	}
	gotMap := map[string][11]uint64{}
	for _, d := range got {
		gotMap[d.name] = d.stats
	}
	if diff := cmp.Diff(want, gotMap); diff != "" {
		t.Errorf("devices (-procfs +ours):\n%s", diff)
	}
}
