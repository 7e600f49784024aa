package storecare

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// A real volume that runs out of space under a stream of inserts and the
// merges they cause: the engine commits parts it could not finish
// writing (on this engine, an empty marks file), in every table. With
// the care running, once the space is back every part reads whole, no
// repair is left pending, the rows lost are counted, and the partitions
// the fault did not touch are as they were.
func TestAVolumeThatFillsUnderWritesLeavesNoUnreadablePart(t *testing.T) {
	vol, dir, st := storeOnTmpfs(t, "192m")
	// Yesterday's hour, in partitions of its own, which the fault's
	// writes and merges never touch.
	loadFleet(t, st, fleetDay())
	yesterday := " WHERE toDate(ts) = toDate(" + fmt.Sprint(fleetDay().Unix()) + ")"
	before1s := mustRows(t, st, "SELECT sum(weighted_count), max(max_us), uniqExact(host, ts) FROM latency_1s"+yesterday)
	before1m := mustRows(t, st, "SELECT sum(weighted_count), max(max_us), uniqExact(host, ts) FROM latency_1m"+yesterday)

	var log testenv.SyncBuffer
	c, err := New(st, Config{Dir: dir, Every: time.Second, Settle: 5 * time.Second, Instance: "store-test",
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	careCtx, stopCare := context.WithCancel(context.Background())
	cared := make(chan struct{})
	go func() { defer close(cared); c.Run(careCtx) }()
	defer func() { stopCare(); <-cared }()

	// Writers: 5,000 requests every 50 ms over the last 2 seconds of 200
	// hosts, and merges asked for all the time.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var inserts, refused int
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			err := st.Exec(context.Background(), fmt.Sprintf(`INSERT INTO requests (ts, service, host, hw_class, endpoint, latency_us, status, weight)
				SELECT toDateTime64(%d, 6, 'UTC') - toIntervalMillisecond(number %% 2000), 'checkout', 'host-' || toString(number %% 200), 'm5', '/pay',
				       toUInt32(1000 + (cityHash64(number, %d) %% 50000)), '200', 1 FROM numbers(5000)`, time.Now().Unix(), i))
			inserts++
			if err != nil {
				refused++
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			st.Exec(context.Background(), "OPTIMIZE TABLE latency_1m")
			st.Exec(context.Background(), "OPTIMIZE TABLE latency_1s")
			time.Sleep(300 * time.Millisecond)
		}
	}()
	time.Sleep(10 * time.Second)

	// The volume: filled, then a 24 MiB hole opened and taken back over
	// and over, so that writes the engine began with room run out of it.
	hog, chunk := filepath.Join(vol, "hog"), filepath.Join(vol, "chunk")
	if _, err := testenv.FillDisk(hog); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(hog)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(hog, max(fi.Size()-24<<20, 0)); err != nil {
		t.Fatal(err)
	}
	for end, k := time.Now().Add(25*time.Second), 0; time.Now().Before(end); k++ {
		testenv.FillDisk(chunk)
		time.Sleep(100 * time.Millisecond)
		os.Remove(chunk)
		time.Sleep(time.Duration(20+k%5*20) * time.Millisecond)
	}
	if err := os.Remove(hog); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	stop()
	wg.Wait()
	t.Logf("%d inserts, %d refused while the volume was full", inserts, refused)

	tables := []string{"requests", "latency_1s", "latency_1m", "counters"}
	var unreadable []string
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(2 * time.Second) {
		unreadable = unreadable[:0]
		for _, tb := range tables {
			for _, p := range mustRows(t, st, "SELECT name FROM system.parts WHERE database = 'default' AND table = '"+tb+"' AND active") {
				if _, err := rows(t, st, "SELECT count() FROM "+tb+" WHERE _part = '"+p+"' AND NOT ignore(*)"); err != nil {
					unreadable = append(unreadable, tb+"/"+p+": "+firstLine(err.Error()))
				}
			}
		}
		pending := 0
		for _, r := range c.Repairs() {
			if r.State == statePending {
				pending++
			}
		}
		if len(unreadable) == 0 && pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("3 minutes after the space came back: %d repairs pending, %d parts unreadable:\n%s\n%s",
				pending, len(unreadable), strings.Join(unreadable, "\n"), log.String())
		}
	}

	rs := c.Repairs()
	count := map[string]int{}
	var lost []Repair
	for _, r := range rs {
		count[r.Table+" "+r.State]++
		if r.State == stateLost {
			lost = append(lost, r)
		}
	}
	t.Logf("parts taken out: %v", count)
	if len(rs) == 0 {
		t.Fatalf("the full volume broke no part this time (the engine committed none it could not read), so the care was not tried:\n%s", log.String())
	}
	// What the care lost it counted, and the rows it did not take out
	// are still there.
	var lostRows float64
	for _, r := range lost {
		lostRows += float64(r.Rows)
	}
	var counted float64
	for _, tb := range tables {
		counted += testutil.ToFloat64(c.m.rowsLost.WithLabelValues(tb))
	}
	if counted != lostRows {
		t.Errorf("spikehunt_store_rows_lost_total sums %v, the lost parts held %v rows", counted, lostRows)
	}
	if got := mustRows(t, st, "SELECT sum(weighted_count), max(max_us), uniqExact(host, ts) FROM latency_1s"+yesterday); got[0] != before1s[0] {
		t.Errorf("yesterday's latency_1s: %v, was %v", got, before1s)
	}
	if got := mustRows(t, st, "SELECT sum(weighted_count), max(max_us), uniqExact(host, ts) FROM latency_1m"+yesterday); got[0] != before1m[0] {
		t.Errorf("yesterday's latency_1m: %v, was %v", got, before1m)
	}
}
