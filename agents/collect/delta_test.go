package collect

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRowSet(t *testing.T) {
	type reading struct {
		cpus []int
		vals []uint64
	}
	tests := []struct {
		name       string
		readings   []reading
		want       []colDelta // of the last reading
		wantResets int
	}{
		{
			name:     "the first reading is a baseline",
			readings: []reading{{[]int{0, 1}, []uint64{5, 6}}},
		},
		{
			name:     "an unchanged header diffs column by column",
			readings: []reading{{[]int{0, 1}, []uint64{5, 6}}, {[]int{0, 1}, []uint64{7, 6}}},
			want:     []colDelta{{0, 2}, {1, 0}},
		},
		{
			name:     "a CPU going offline shifts the columns; they are matched by CPU number",
			readings: []reading{{[]int{0, 1, 2}, []uint64{5, 6, 7}}, {[]int{0, 2}, []uint64{5, 10}}},
			want:     []colDelta{{0, 0}, {1, 3}},
		},
		{
			name:     "a CPU coming online is a baseline for that CPU only",
			readings: []reading{{[]int{0, 2}, []uint64{5, 10}}, {[]int{0, 1, 2}, []uint64{6, 100, 11}}},
			want:     []colDelta{{0, 1}, {2, 1}},
		},
		{
			name:       "a column that went down is a reset: no delta, counted",
			readings:   []reading{{[]int{0, 1}, []uint64{5, 6}}, {[]int{0, 1}, []uint64{1, 7}}},
			want:       []colDelta{{1, 1}},
			wantResets: 1,
		},
		{
			name:     "fixed fields (no header) diff by position",
			readings: []reading{{nil, []uint64{1, 2, 3}}, {nil, []uint64{4, 4, 4}}},
			want:     []colDelta{{0, 3}, {1, 2}, {2, 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tally resetTally
			rows := newRowSet[string](&tally)
			var got []colDelta
			for _, r := range tt.readings {
				rows.begin(r.cpus)
				got = rows.deltas("NET_RX", r.vals, nil)
				rows.commit()
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(colDelta{})); diff != "" {
				t.Errorf("deltas (-want +got):\n%s", diff)
			}
			if n := tally.takeResets(); n != tt.wantResets {
				t.Errorf("resets = %d, want %d", n, tt.wantResets)
			}
		})
	}
}

func TestCounterSetForgetsSeriesMissingFromAReading(t *testing.T) {
	var tally resetTally
	c := newCounterSet[string](&tally)
	c.delta("eth0", 10)
	c.delta("veth1", 10)
	c.commit()
	c.delta("eth0", 12) // veth1 was deleted
	c.commit()
	if d, ok := c.delta("veth1", 50); ok {
		t.Errorf("a recreated veth1 emitted delta %d against its old self, want a baseline", d)
	}
	if d, ok := c.delta("eth0", 15); !ok || d != 3 {
		t.Errorf("eth0 delta = %d, %v; want 3, true", d, ok)
	}
}
