package storecare

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// storeOnTmpfs opens a store in a folder of a tmpfs volume of its own
// of size (mount's size=), which the test can fill: the volume and the
// store's folder on it. The store closes, then the volume goes, when the
// test ends.
func storeOnTmpfs(t *testing.T, size string) (vol, dir string, st *store.Embedded) {
	t.Helper()
	vol = testenv.MountTmpfs(t, t.TempDir(), "store-volume", size)
	dir = filepath.Join(vol, "store")
	st = openStore(t, dir)
	t.Cleanup(func() { st.Close() })
	return vol, dir, st
}

// A part broken while the volume was full, that nothing has read yet, is
// found by reading the parts written since the volume ran low, once the
// space is back: not before (nothing names it), not while it is full.
func TestPartsWrittenWhileTheVolumeWasLowAreReadOnceTheSpaceIsBack(t *testing.T) {
	vol, dir, st := storeOnTmpfs(t, "256m")
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

// The engine keeps store.MinFreeDiskRatio of the volume free: an insert
// that finds less is refused whole (NOT_ENOUGH_SPACE, which the ingest
// retries), and the same insert lands once there is room.
func TestTheStoreRefusesAnInsertBeforeItsVolumeIsFull(t *testing.T) {
	vol, _, st := storeOnTmpfs(t, "128m")
	schemaApply(t, st)
	insert := "INSERT INTO counters (ts_start, interval_ms, host, cpu, metric, device, mode, value) VALUES (now(), 10000, 'h', -1, 'm', '', '', 1)"
	hog := filepath.Join(vol, "hog")
	if _, err := testenv.FillDisk(hog); err != nil {
		t.Fatal(err)
	}
	// Leave 1 MiB, under 2 % of 128 MiB: room for the row, not for the
	// headroom.
	fi, _ := os.Stat(hog)
	if err := os.Truncate(hog, fi.Size()-1<<20); err != nil {
		t.Fatal(err)
	}
	err := st.Exec(context.Background(), insert)
	if err == nil || !strings.Contains(err.Error(), "NOT_ENOUGH_SPACE") {
		t.Fatalf("an insert with 1 MiB of 128 MiB free: %v, want NOT_ENOUGH_SPACE", err)
	}
	if err := os.Truncate(hog, fi.Size()-16<<20); err != nil {
		t.Fatal(err)
	}
	exec(t, st, insert)
	if got := mustRows(t, st, "SELECT count() FROM counters WHERE host = 'h'"); got[0] != "1" {
		t.Fatalf("counters holds %s rows of the insert, want 1", got[0])
	}
}
