package collect

import (
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/procfs"
)

func TestParseMeminfo(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want slabBytes
	}{
		{
			name: "slab and its split, in KiB",
			in:   "MemTotal:  100 kB\nSlab:             545380 kB\nSReclaimable:     490904 kB\nSUnreclaim:        54476 kB\n",
			want: slabBytes{slab: 545380 * 1024, reclaimable: 490904 * 1024, unreclaimable: 54476 * 1024, hasSlab: true, hasSplit: true},
		},
		{
			name: "a kernel before 2.6.19 has only Slab",
			in:   "Slab:  10 kB\n",
			want: slabBytes{slab: 10240, hasSlab: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMeminfo([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(slabBytes{})); diff != "" {
				t.Errorf("parseMeminfo (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseMeminfoRejectsMalformedInput(t *testing.T) {
	for _, tt := range []struct{ name, in string }{
		{"no Slab line", "MemTotal: 1 kB\n"},
		{"a unit other than kB", "Slab: 1 MB\n"},
		{"a value that is not a number", "Slab: lots kB\n"},
		{"a value that overflows in bytes", "Slab: 18446744073709551615 kB\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parseMeminfo([]byte(tt.in)); !errors.Is(err, errMalformed) {
				t.Errorf("parseMeminfo(%q) error = %v, want errMalformed", tt.in, err)
			}
		})
	}
}

func TestParseMeminfoAgreesWithProcfsOnRealFile(t *testing.T) {
	b, err := os.ReadFile("testdata/real/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseMeminfo(b)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := procfs.NewFS("testdata/real/proc")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := fs.Meminfo()
	if err != nil {
		t.Fatal(err)
	}
	want := [3]uint64{*ref.SlabBytes, *ref.SReclaimableBytes, *ref.SUnreclaimBytes}
	if diff := cmp.Diff(want, [3]uint64{got.slab, got.reclaimable, got.unreclaimable}); diff != "" {
		t.Errorf("slab bytes (-procfs +ours):\n%s", diff)
	}
}
