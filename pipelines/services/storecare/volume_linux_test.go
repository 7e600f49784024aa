package storecare

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// A part broken while the volume was full, that nothing has read yet, is
// found by reading the parts written since the volume ran low, once the
// space is back: not before (nothing names it), not while it is full.
func TestPartsWrittenWhileTheVolumeWasLowAreReadOnceTheSpaceIsBack(t *testing.T) {
	vol := testenv.MountTmpfs(t, t.TempDir(), "store-volume", "256m")
	dir := filepath.Join(vol, "store")
	st := openStore(t, dir)
	defer st.Close()
	start := fleetDay()
	loadFleet(t, st, start)
	truth := mustRows(t, st, minuteTruth)
	name := breakPart(t, st, "latency_1m")

	clk := &clock{time.Now().UTC()}
	c, _, log := newCarer(t, st, dir, clk, time.Minute)
	ctx := context.Background()
	if err := c.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if rs := c.Repairs(); len(rs) != 0 {
		t.Fatalf("repairs before any fault was seen: %+v", rs)
	}

	fill := filepath.Join(vol, "fill")
	if _, err := testenv.FillDisk(fill); err != nil {
		t.Fatal(err)
	}
	clk.t = clk.t.Add(10 * time.Second)
	c.Round(ctx) // its own counters rows cannot be written: an error is expected
	if free := testutil.ToFloat64(c.m.free); free >= minLowFree {
		t.Fatalf("spikehunt_store_volume_free_bytes = %v on a full volume", free)
	}
	if rs := c.Repairs(); len(rs) != 0 {
		t.Fatalf("repairs while the volume is full: %+v", rs)
	}

	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	clk.t = clk.t.Add(10 * time.Second)
	if err := c.Round(ctx); err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	rs := c.Repairs()
	if len(rs) != 1 || rs[0].Part != name || rs[0].State != stateRebuilt {
		t.Fatalf("repairs once the space is back: %+v, want latency_1m/%s rebuilt\n%s", rs, name, log)
	}
	if v := testutil.ToFloat64(c.m.verified); v < 2 {
		t.Errorf("spikehunt_store_parts_verified_total = %v, want every part written since the spell", v)
	}
	sameMinutes(t, mustRows(t, st, minuteRollup), truth)
}
