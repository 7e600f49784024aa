package defaults

import (
	"testing"
	"time"
)

func TestFillSetsOnlyAZeroField(t *testing.T) {
	var d time.Duration
	Fill(&d, time.Second)
	if d != time.Second {
		t.Errorf("zero duration: got %v, want 1s", d)
	}
	Fill(&d, time.Minute)
	if d != time.Second {
		t.Errorf("set duration: got %v, want it kept at 1s", d)
	}
	n := -1
	Fill(&n, 5)
	if n != -1 {
		t.Errorf("negative int: got %d, want it kept (negative often means disabled)", n)
	}
	s := ""
	Fill(&s, "x")
	if s != "x" {
		t.Errorf("empty string: got %q, want x", s)
	}
}
