package collect

import (
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/procfs"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want statSnapshot
	}{
		{
			name: "a 2.6-era line with fewer modes keeps the ones it has",
			in:   "cpu  10 0 5 100\ncpu0 10 0 5 100 3 1 2\nctxt 9\n",
			want: statSnapshot{cpus: []cpuTicks{{cpu: 0, modes: 7, ticks: [8]uint64{10, 0, 5, 100, 3, 1, 2}}}, contextSwitches: 9, hasCtxt: true},
		},
		{
			name: "guest columns are not read and offline CPUs simply have no line",
			in:   "cpu0 1 2 3 4 5 6 7 8 9 10\ncpu3 11 12 13 14 15 16 17 18 19 20\n",
			want: statSnapshot{cpus: []cpuTicks{
				{cpu: 0, modes: 8, ticks: [8]uint64{1, 2, 3, 4, 5, 6, 7, 8}},
				{cpu: 3, modes: 8, ticks: [8]uint64{11, 12, 13, 14, 15, 16, 17, 18}},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(statSnapshot{}, cpuTicks{})); diff != "" {
				t.Errorf("parseStat (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseStatRejectsMalformedInput(t *testing.T) {
	for _, tt := range []struct{ name, in string }{
		{"an empty file", ""},
		{"only the aggregate line", "cpu  1 2 3 4 5 6 7 8\n"},
		{"a time that is not a number", "cpu0 1 2 x 4 5 6 7 8\n"},
		{"a CPU label without a number", "cpux 1 2 3 4\n"},
		{"a line with three fields", "cpu0 1 2 3\n"},
		{"a context-switch count that is not a number", "cpu0 1 2 3 4\nctxt -1\n"},
		{"a count beyond 64 bits", "cpu0 1 2 3 99999999999999999999\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parseStat([]byte(tt.in)); !errors.Is(err, errMalformed) {
				t.Errorf("parseStat(%q) error = %v, want errMalformed", tt.in, err)
			}
		})
	}
}

// The parser agrees with prometheus/procfs on this machine's /proc/stat.
func TestParseStatAgreesWithProcfsOnRealFile(t *testing.T) {
	b, err := os.ReadFile("testdata/real/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseStat(b)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := procfs.NewFS("testdata/real/proc")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := fs.Stat()
	if err != nil {
		t.Fatal(err)
	}
	want := map[int][8]float64{}
	for cpu, s := range ref.CPU {
		want[int(cpu)] = [8]float64{s.User, s.Nice, s.System, s.Idle, s.Iowait, s.IRQ, s.SoftIRQ, s.Steal}
	}
	gotSecs := map[int][8]float64{}
	for _, c := range got.cpus {
		var v [8]float64
		for i := range c.modes {
			v[i] = float64(c.ticks[i]) / userHZ
		}
		gotSecs[c.cpu] = v
	}
	if diff := cmp.Diff(want, gotSecs); diff != "" {
		t.Errorf("per-CPU seconds (-procfs +ours):\n%s", diff)
	}
	if got.contextSwitches != ref.ContextSwitches {
		t.Errorf("context switches = %d, procfs says %d", got.contextSwitches, ref.ContextSwitches)
	}
}
