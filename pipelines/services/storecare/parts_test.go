package storecare

import (
	"errors"
	"testing"
)

// The engine names a part by its absolute path in a reader's error and by
// its path under the data directory in a loader's; both must find it, and
// a part of the same name in another table must not be taken for it.
func TestAnEngineMessageNamesItsPartWhicheverPathItUses(t *testing.T) {
	parts := []part{
		{Table: "latency_1m", Name: "20261130_1_329_250", Path: "/data/store/060/0608-aa/20261130_1_329_250/"},
		{Table: "latency_1s", Name: "20261130_1_329_250", Path: "/data/store/1b2/1b2c-bb/20261130_1_329_250/"},
		{Table: "latency_1m", Name: "20261130_330_330_0", Path: "/data/store/060/0608-aa/20261130_330_330_0/"},
	}
	for _, c := range []struct{ msg, want string }{
		{"Empty marks file '/data/store/060/0608-aa/20261130_1_329_250/data.cmrk4': 0, must be: 624", "latency_1m/20261130_1_329_250"},
		{"store/1b2/1b2c-bb/20261130_1_329_250/data.cmrk4 has unexpected size: 0 instead of 124", "latency_1s/20261130_1_329_250"},
		{"Memory limit (total) exceeded", ""},
		{"/data/store/060/0608-aa/20261130_1_329_2500/x", ""},
	} {
		got := named(parts, c.msg)
		if c.want == "" {
			if len(got) != 0 {
				t.Errorf("%q names %v, want none", c.msg, got)
			}
			continue
		}
		if len(got) != 1 || got[0].key() != c.want {
			t.Errorf("%q names %v, want %s", c.msg, got, c.want)
		}
	}
}

func TestOnlyCorruptionCodesTakeAPartOut(t *testing.T) {
	for _, c := range []struct {
		err     string
		corrupt bool
	}{
		{"read: Code: 246. DB::Exception: Empty marks file", true},
		{"Code: 33. DB::Exception: Cannot read all data", true},
		{"Code: 241. DB::Exception: Memory limit (total) exceeded", false},
		{"Code: 159. DB::Exception: Timeout exceeded", false},
		{"connection refused", false},
	} {
		_, ok := corruptCodes[errCode(errors.New(c.err))]
		if ok != c.corrupt {
			t.Errorf("%q: corrupt %v, want %v", c.err, ok, c.corrupt)
		}
	}
}
