package export

import (
	"strings"
	"testing"
	"time"
)

// Validate judges a config as New would run it and changes nothing in
// it: defaults are WithDefaults' job, on a copy.
func TestValidateLeavesTheConfigAsItWas(t *testing.T) {
	for _, tc := range []struct {
		in      Config
		wantErr string
	}{
		{Config{}, ""},
		{Config{MaxSpans: 10}, ""},
		{Config{MaxSpans: -1}, "max_spans = -1"},
		{Config{MaxDelay: time.Hour}, "max_delay"},
	} {
		got := tc.in
		err := got.Validate()
		if got != tc.in {
			t.Errorf("Validate changed %+v into %+v", tc.in, got)
		}
		if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%+v: Validate = %v, want %q", tc.in, err, tc.wantErr)
		}
	}
	if c := (Config{}).WithDefaults(); c.MaxSpans != DefaultMaxSpans || c.MaxDelay != DefaultMaxDelay {
		t.Errorf("WithDefaults = %+v, want %d spans and %s", c, DefaultMaxSpans, DefaultMaxDelay)
	}
}
