package query

import (
	"testing"
	"time"
)

// The filters render one rule: a row lasting [start, end) is in the range
// [from, to) when the two overlap, in milliseconds; an empty service or
// host is no filter, and values are quoted.
func TestWhereRendersEachFilterOnce(t *testing.T) {
	from, to := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC), time.Date(2026, 3, 1, 12, 0, 0, 500e6, time.UTC) // fixed date: rendered SQL only, never stored
	rangeSQL := func(iv Interval) string {
		return iv.Start + " < fromUnixTimestamp64Milli(1772366400500, 'UTC') AND " + iv.End + " > fromUnixTimestamp64Milli(1772359200000, 'UTC')"
	}
	for _, tc := range []struct {
		name string
		got  Where
		want string
	}{
		{"nothing", Where{}, "1"},
		{"live rows", Live(), "is_deleted = 0"},
		{"a range alone", Scope{From: from, To: to, Service: "billy"}.Range(Where{}, Second), rangeSQL(Second)},
		{"every filter of the scope", Scope{From: from, To: to, Service: "billy", Host: "h'01"}.Filter(Live(), Window),
			"is_deleted = 0 AND " + rangeSQL(Window) + " AND service = 'billy' AND host = 'h\\'01'"},
		{"no service, no host", Scope{From: from, To: to}.Filter(Where{}, Lookback), rangeSQL(Lookback)},
		{"a list", Live().In("spike_id", []string{"a", "b"}), "is_deleted = 0 AND spike_id IN ('a', 'b')"},
	} {
		if got := tc.got.String(); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
	// A Where is a value: adding to one leaves the other as it was.
	base := Live()
	_ = base.And("x = 1")
	if base.String() != "is_deleted = 0" {
		t.Errorf("And changed its receiver: %s", base)
	}
}
