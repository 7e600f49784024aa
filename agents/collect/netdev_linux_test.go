package collect

import (
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/procfs"
)

const netDevHeader = "Inter-|   Receive                                                |  Transmit\n" +
	" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"

func TestParseNetDev(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []netDevLine
	}{
		{
			name: "every interface is listed, lo and down ones too",
			in: netDevHeader +
				"    lo:     100       2    0    0    0     0          0         0      100       2    0    0    0     0       0          0\n" +
				"  qfe0: 9888000    8000    1    3    0     0          0         0        0       0    0    0    0     0       0          0\n",
			want: []netDevLine{
				{name: "lo", stats: [16]uint64{100, 2, 0, 0, 0, 0, 0, 0, 100, 2}},
				{name: "qfe0", stats: [16]uint64{9888000, 8000, 1, 3}},
			},
		},
		{
			name: "an old kernel prints no blank after the colon",
			in:   netDevHeader + "  eth0:123456789 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n",
			want: []netDevLine{{name: "eth0", stats: [16]uint64{123456789, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}},
		},
		{
			name: "names with dots, dashes and @ are kept whole",
			in:   netDevHeader + "eth0.100-x@y: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n",
			want: []netDevLine{{name: "eth0.100-x@y", stats: [16]uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseNetDev([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(netDevLine{})); diff != "" {
				t.Errorf("parseNetDev (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseNetDevRejectsMalformedInput(t *testing.T) {
	for _, tt := range []struct{ name, in string }{
		{"fifteen columns", "eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n"},
		{"a line without a colon", "eth0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"},
		{"an empty name", "  : 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"},
		{"a name that would climb out of class/net", "..: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"},
		{"a name with a slash", "a/b: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"},
		{"a negative count", "eth0: -1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parseNetDev([]byte(netDevHeader + tt.in)); !errors.Is(err, errMalformed) {
				t.Errorf("parseNetDev(%q) error = %v, want errMalformed", tt.in, err)
			}
		})
	}
}

func TestParseNetDevAgreesWithProcfsOnRealFile(t *testing.T) {
	b, err := os.ReadFile("testdata/real/proc/net/dev")
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseNetDev(b)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := procfs.NewFS("testdata/real/proc")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := fs.NetDev()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][16]uint64{}
	for name, l := range ref {
		want[name] = [16]uint64{l.RxBytes, l.RxPackets, l.RxErrors, l.RxDropped, l.RxFIFO, l.RxFrame, l.RxCompressed, l.RxMulticast,
			l.TxBytes, l.TxPackets, l.TxErrors, l.TxDropped, l.TxFIFO, l.TxCollisions, l.TxCarrier, l.TxCompressed}
	}
	gotMap := map[string][16]uint64{}
	for _, l := range got {
		gotMap[l.name] = l.stats
	}
	if diff := cmp.Diff(want, gotMap); diff != "" {
		t.Errorf("interfaces (-procfs +ours):\n%s", diff)
	}
}
