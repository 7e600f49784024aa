package collect

import (
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseSchedstat(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []schedCPU
	}{
		{
			name: "run delay is field 8 and timeslices field 9 of each cpu line; domain lines are skipped",
			in: "version 15\ntimestamp 4295000000\n" +
				"cpu0 0 0 9 4 7 3 912345678901 81234567890 512345\n" +
				"domain0 00000003 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36\n" +
				"cpu5 0 0 9 4 7 3 1 2 3\n",
			want: []schedCPU{{cpu: 0, runDelayNs: 81234567890, timeslices: 512345}, {cpu: 5, runDelayNs: 2, timeslices: 3}},
		},
		{
			name: "version 17 cpu lines read the same",
			in:   "version 17\ntimestamp 1\ncpu0 1 2 3 4 5 6 7 8 9\n",
			want: []schedCPU{{cpu: 0, runDelayNs: 8, timeslices: 9}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseSchedstat([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(schedCPU{})); diff != "" {
				t.Errorf("parseSchedstat (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseSchedstatRejectsMalformedInput(t *testing.T) {
	for _, tt := range []struct{ name, in string }{
		{"an empty file", ""},
		{"version 14, whose cpu lines differ", "version 14\ncpu0 1 2 3 4 5 6 7 8 9 10 11 12\n"},
		{"no version line", "cpu0 1 2 3 4 5 6 7 8 9\n"},
		{"a cpu line with eight fields", "version 15\ncpu0 1 2 3 4 5 6 7 8\n"},
		{"no cpu line", "version 15\ntimestamp 1\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parseSchedstat([]byte(tt.in)); !errors.Is(err, errMalformed) {
				t.Errorf("parseSchedstat(%q) error = %v, want errMalformed", tt.in, err)
			}
		})
	}
}

func TestParseSchedstatOnFixture(t *testing.T) {
	b, err := os.ReadFile("testdata/schedstat/0/proc/schedstat")
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseSchedstat(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[2].runDelayNs != 81234569890 {
		t.Errorf("parseSchedstat = %+v, want 4 CPUs with cpu2 run delay 81234569890", got)
	}
}
