package collect

import (
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/procfs"
)

func TestParseSoftirqs(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want softirqSnapshot
	}{
		{
			name: "columns are numbered from the header and an unknown vector is kept",
			in: "                    CPU0       CPU1\n" +
				"      NET_RX:         10         20\n" +
				"   NEW_THING:          1          2\n",
			want: softirqSnapshot{cpus: []int{0, 1}, vectors: []softirqVector{
				{name: "NET_RX", perCPU: []uint64{10, 20}},
				{name: "NEW_THING", perCPU: []uint64{1, 2}},
			}},
		},
		{
			name: "a header without trailing blanks and a blank line at the end",
			in:   "CPU0\nHI: 7\n\n",
			want: softirqSnapshot{cpus: []int{0}, vectors: []softirqVector{{name: "HI", perCPU: []uint64{7}}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseSoftirqs([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(softirqSnapshot{}, softirqVector{})); diff != "" {
				t.Errorf("parseSoftirqs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseSoftirqsRejectsMalformedInput(t *testing.T) {
	for _, tt := range []struct{ name, in string }{
		{"an empty file", ""},
		{"a header that names no CPU", "HI: 1 2\n"},
		{"CPUs out of order in the header", "CPU1 CPU0\nHI: 1 2\n"},
		{"fewer values than CPUs", "CPU0 CPU1\nHI: 1\n"},
		{"more values than CPUs", "CPU0 CPU1\nHI: 1 2 3\n"},
		{"a vector without its colon", "CPU0\nHI 1\n"},
		{"a value that is not a number", "CPU0\nHI: 1x\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parseSoftirqs([]byte(tt.in)); !errors.Is(err, errMalformed) {
				t.Errorf("parseSoftirqs(%q) error = %v, want errMalformed", tt.in, err)
			}
		})
	}
}

func TestParseSoftirqsAgreesWithProcfsOnRealFile(t *testing.T) {
	b, err := os.ReadFile("testdata/real/proc/softirqs")
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseSoftirqs(b)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := procfs.NewFS("testdata/real/proc")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := fs.Softirqs()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]uint64{
		"HI": ref.Hi, "TIMER": ref.Timer, "NET_TX": ref.NetTx, "NET_RX": ref.NetRx, "BLOCK": ref.Block,
		"IRQ_POLL": ref.IRQPoll, "TASKLET": ref.Tasklet, "SCHED": ref.Sched, "HRTIMER": ref.HRTimer, "RCU": ref.RCU,
	}
	gotMap := map[string][]uint64{}
	for _, v := range got.vectors {
		gotMap[v.name] = v.perCPU
	}
	if diff := cmp.Diff(want, gotMap); diff != "" {
		t.Errorf("vectors (-procfs +ours):\n%s", diff)
	}
	if diff := cmp.Diff([]int{0, 1}, got.cpus); diff != "" {
		t.Errorf("CPUs (-want +got):\n%s", diff)
	}
}
