package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// t0 is 00:00 of a day the tables of any TTL keep.
var t0 = testenv.RecentDay()

// loadKnownFleet inserts hosts × seconds × 1000 requests in 100k-row batches.
// In every host-second, 999 requests take 100–149 µs with weight 1, and one
// takes 1000·(host+1)+second µs with weight 1000: the per-second max and the
// weighted quantiles have answers known in advance.
func loadKnownFleet(t testing.TB, st store.Store, hosts, seconds int) {
	t.Helper()
	ctx := context.Background()
	if err := st.Exec(ctx, requestsDDL); err != nil {
		t.Fatal(err)
	}
	b := newRequestsBatch()
	flush := func() {
		if b.rows() == 0 {
			return
		}
		if err := st.Insert(ctx, "requests", b.input()); err != nil {
			t.Fatal(err)
		}
		b.reset()
	}
	for h := 0; h < hosts; h++ {
		host := fmt.Sprintf("h%02d", h)
		for s := 0; s < seconds; s++ {
			sec := t0.Add(time.Duration(s) * time.Second)
			for k := 0; k < 1000; k++ {
				ts := sec.Add(time.Duration(k) * time.Millisecond)
				if k == 999 {
					b.add(ts, "billy", host, "B", "/get", uint32(1000*(h+1)+s), 1000)
				} else {
					b.add(ts, "billy", host, "A", "/get", uint32(100+k%50), 1)
				}
				if b.rows() == 100_000 {
					flush()
				}
			}
		}
	}
	flush()
}

func TestEmbeddedAnswersKnownQueriesOverAMillionRows(t *testing.T) {
	st := embedded(t)
	loadKnownFleet(t, st, 10, 100)
	if got := scalar(t, st, "SELECT count() FROM requests"); got != "1000000" {
		t.Fatalf("count = %s, want 1000000", got)
	}
	var rows, wrong int
	err := st.Query(context.Background(), `SELECT host, toUnixTimestamp(toStartOfSecond(ts)) AS s, max(latency_us) AS m
		FROM requests WHERE service = 'billy' GROUP BY host, s`, func(b store.Block) error {
		hosts, secs, maxes := b.Columns[0].(*proto.ColLowCardinality[string]), b.Columns[1].(*proto.ColUInt32), b.Columns[2].(*proto.ColUInt32)
		for i := 0; i < b.Rows; i++ {
			h, _ := strconv.Atoi(hosts.Row(i)[1:])
			want := uint32(1000*(h+1)) + secs.Row(i) - uint32(t0.Unix())
			if maxes.Row(i) != want {
				wrong++
			}
			rows++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if rows != 1000 || wrong != 0 {
		t.Fatalf("per-host per-second max: %d rows (want 1000), %d wrong", rows, wrong)
	}
	// Host h00: body weight 99,900 at ≤149 µs, spikes 100×1000 at 1000–1099 µs.
	// The weighted p75 lies in the spikes (the 51st of them); unweighted, in the body.
	weighted, _ := strconv.Atoi(scalar(t, st, "SELECT quantileExactWeighted(0.75)(latency_us, weight) FROM requests WHERE host = 'h00'"))
	if weighted < 1049 || weighted > 1051 {
		t.Fatalf("weighted p75 = %d µs, want 1050±1", weighted)
	}
	plain, _ := strconv.Atoi(scalar(t, st, "SELECT quantileExact(0.75)(latency_us) FROM requests WHERE host = 'h00'"))
	if plain >= 150 {
		t.Fatalf("unweighted p75 = %d µs, want < 150", plain)
	}
}

func TestEmbeddedServesConcurrentCallers(t *testing.T) {
	st := embedded(t)
	ctx := context.Background()
	if err := st.Exec(ctx, "CREATE TABLE c (g UInt32, v UInt64) ENGINE = MergeTree ORDER BY g"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for round := 0; round < 10; round++ {
				var gc proto.ColUInt32
				var vc proto.ColUInt64
				for i := 0; i < 1000; i++ {
					gc.Append(uint32(g))
					vc.Append(uint64(i))
				}
				if err := st.Insert(ctx, "c", proto.Input{{Name: "g", Data: &gc}, {Name: "v", Data: &vc}}); err != nil {
					errs <- err
					return
				}
				tab, err := store.Select(ctx, st, fmt.Sprintf("SELECT count() FROM c WHERE g = %d", g))
				if err != nil {
					errs <- err
					return
				}
				if want := fmt.Sprint((round + 1) * 1000); tab.Rows[0][0] != want {
					errs <- fmt.Errorf("goroutine %d round %d: count %s, want %s", g, round, tab.Rows[0][0], want)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestEmbeddedCancelledQueryReturnsAtOnceAndTheStoreGoesOn(t *testing.T) {
	st := embedded(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	err := st.Query(ctx, "SELECT number, sleepEachRow(0.01) FROM numbers(300) SETTINGS max_block_size = 1", func(store.Block) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("returned after %v", d)
	}
	// Every connection of the pool still serves statements.
	for i := 0; i < 8; i++ {
		if got := scalar(t, st, "SELECT 41 + 1"); got != "42" {
			t.Fatalf("after cancel: %s", got)
		}
	}
}

func TestEmbeddedDeadlineStopsTheEngine(t *testing.T) {
	st := embedded(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := st.Query(ctx, "SELECT count() FROM numbers(1e12)", func(store.Block) error { return nil })
	if err == nil {
		t.Fatal("a 1e12-row scan finished within a second")
	}
	// The engine stops at max_execution_time too, so the pool is free again.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	for i := 0; i < 4; i++ {
		if _, err := store.Select(ctx2, st, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEmbeddedInsertDeduplicatesByToken(t *testing.T) {
	st := embedded(t)
	ctx := context.Background()
	if err := st.Exec(ctx, "CREATE TABLE d (v UInt64) ENGINE = MergeTree ORDER BY v SETTINGS non_replicated_deduplication_window = 100"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		var v proto.ColUInt64
		v.AppendArr([]uint64{1, 2, 3})
		if err := st.Insert(ctx, "d", proto.Input{{Name: "v", Data: &v}}, store.WithSetting("insert_deduplication_token", "otlp_spans-0-100-199")); err != nil {
			t.Fatal(err)
		}
	}
	if got := scalar(t, st, "SELECT count() FROM d"); got != "3" {
		t.Fatalf("count after three inserts with one token = %s, want 3", got)
	}
}

// Close waits for the statements running on goroutines of their own, and
// a streaming read that starts once Close has begun is refused, as every
// other statement is: it once skipped the check, and its WaitGroup Add
// raced Close's Wait (a panic in CI: "WaitGroup is reused before previous
// Wait has returned").
func TestAStreamStartedWhileTheStoreClosesIsRefused(t *testing.T) {
	shared := embedded(t)
	st, err := store.OpenEmbedded(context.Background(), store.EmbeddedConfig{Dir: testenv.ClickHouseDir(), Database: shared.Database(), Connections: 2})
	if err != nil {
		t.Fatal(err)
	}
	// A read that runs for a second holds Close.
	running := make(chan error, 1)
	go func() {
		running <- st.Query(context.Background(), "SELECT sleepEachRow(0.1) FROM numbers(10) SETTINGS max_block_size = 1", func(store.Block) error { return nil })
	}()
	time.Sleep(300 * time.Millisecond)
	closed := make(chan struct{})
	go func() { st.Close(); close(closed) }()
	time.Sleep(300 * time.Millisecond)
	select {
	case <-closed:
		t.Fatal("Close returned while a read ran")
	default:
	}
	var out bytes.Buffer
	if err := st.QueryRaw(context.Background(), store.RawStatement{Query: "SELECT 1"}, "TSV", &out); err == nil {
		t.Errorf("a stream started after Close began ran: %q", out.String())
	}
	if err := <-running; err != nil {
		t.Errorf("the read Close waited for: %v", err)
	}
	<-closed
}
