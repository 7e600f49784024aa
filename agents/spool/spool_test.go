package spool

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// payloadFor is the payload the tests append as record seq: its size and
// bytes depend on seq, so a record read under the wrong number or with
// damaged bytes shows.
func payloadFor(seq uint64) []byte {
	p := make([]byte, 64+(seq*7919)%960)
	binary.LittleEndian.PutUint64(p, seq)
	for i := 8; i < len(p); i++ {
		p[i] = byte(seq*31 + uint64(i))
	}
	return p
}

func testConfig(t testing.TB) Config {
	return Config{Dir: t.TempDir(), SegmentBytes: 4 << 10, MaxBytes: 4 << 20, FsyncInterval: 50 * time.Millisecond}
}

func mustOpen(t testing.TB, cfg Config) (*Spool, Recovery) {
	t.Helper()
	s, rec, err := Open(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, rec
}

func appendN(t testing.TB, s *Spool, from, to uint64) {
	t.Helper()
	for seq := from; seq <= to; seq++ {
		got, err := s.Append(payloadFor(seq))
		if err != nil {
			t.Fatal(err)
		}
		if got != seq {
			t.Fatalf("Append returned seq %d, want %d", got, seq)
		}
	}
}

// readAll reads every record from seq from on, in batches of 100, and checks
// that each carries the payload of its number.
func readAll(t testing.TB, s *Spool, from uint64) []uint64 {
	t.Helper()
	var seqs []uint64
	for {
		recs, err := s.Read(from, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			return seqs
		}
		for _, r := range recs {
			if !bytes.Equal(r.Payload, payloadFor(r.Seq)) {
				t.Fatalf("record %d: wrong payload (%d bytes)", r.Seq, len(r.Payload))
			}
			if len(seqs) > 0 && r.Seq <= seqs[len(seqs)-1] {
				t.Fatalf("record %d read after %d", r.Seq, seqs[len(seqs)-1])
			}
			seqs = append(seqs, r.Seq)
		}
		from = recs[len(recs)-1].Seq + 1
	}
}

func span(from, to uint64) []uint64 {
	var s []uint64
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

func segmentFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func equalSeqs(t testing.TB, what string, want, got []uint64) {
	t.Helper()
	if fmt.Sprint(want) != fmt.Sprint(got) {
		t.Fatalf("%s: got %d records %v…, want %d records %v…", what, len(got), head(got), len(want), head(want))
	}
}

func head(s []uint64) []uint64 { return s[:min(len(s), 8)] }

func TestRecordsComeBackInOrderAcrossSegmentsAndReopens(t *testing.T) {
	cfg := testConfig(t)
	s, rec := mustOpen(t, cfg)
	if rec.NextSeq != 1 || !rec.Clean || rec.Records != 0 {
		t.Fatalf("a new spool: %+v", rec)
	}
	appendN(t, s, 1, 2000)
	segs := len(segmentFiles(t, cfg.Dir))
	if segs < 50 {
		t.Fatalf("%d segment files for 2000 records of 64–1023 bytes in 4 KiB segments, want many", segs)
	}
	equalSeqs(t, "read from the start", span(1, 2000), readAll(t, s, 0))
	equalSeqs(t, "read from 1500", span(1500, 2000), readAll(t, s, 1500))

	if err := s.Ack(1000); err != nil {
		t.Fatal(err)
	}
	if n, b := s.Pending(); n != 1000 || b <= 0 || b > s.Stats().Bytes {
		t.Fatalf("Pending() = %d, %d after acking half, want 1000 records in at most %d bytes", n, b, s.Stats().Bytes)
	}
	if after := len(segmentFiles(t, cfg.Dir)); after > segs/2+2 {
		t.Fatalf("%d segment files after acking half of %d, want about half", after, segs)
	}
	equalSeqs(t, "read from the first unacked", span(1001, 2000), readAll(t, s, 0))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, rec = mustOpen(t, cfg)
	if rec.AckedSeq != 1000 || rec.NextSeq != 2001 || rec.Records != 1000 || !rec.Clean || rec.LossWindow != 0 ||
		rec.CorruptRecords+rec.TornRecords != 0 {
		t.Fatalf("reopened: %+v", rec)
	}
	equalSeqs(t, "after reopening", span(1001, 2000), readAll(t, s, 0))
	appendN(t, s, 2001, 2100)
	if err := s.Ack(2100); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Pending(); n != 0 {
		t.Fatalf("Pending() = %d after acking everything", n)
	}
	if files := segmentFiles(t, cfg.Dir); len(files) != 1 {
		t.Fatalf("%d segment files after acking everything, want only the one being written", len(files))
	}
	st := s.Stats()
	if st.Appended != 100 || st.Acked != 1100 || st.DroppedRecords != 0 || st.CorruptRecords != 0 {
		t.Fatalf("Stats() = %+v", st)
	}
}

func TestTheCapDropsTheOldestRecords(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxBytes = 16 << 10
	s, _ := mustOpen(t, cfg)
	appendN(t, s, 1, 10)
	if err := s.Ack(10); err != nil {
		t.Fatal(err)
	}
	for seq := uint64(11); seq <= 400; seq++ {
		appendN(t, s, seq, seq)
		if _, b := s.Pending(); b > cfg.MaxBytes || s.Stats().Bytes > cfg.MaxBytes {
			t.Fatalf("after record %d: %d pending bytes, %d on disk, cap %d", seq, b, s.Stats().Bytes, cfg.MaxBytes)
		}
	}
	n, _ := s.Pending()
	st := s.Stats()
	if st.Appended != st.Acked+st.DroppedRecords+uint64(n) || st.DroppedRecords < 300 || st.DroppedBytes <= 0 {
		t.Fatalf("Stats() = %+v with %d pending: appended ≠ acked + dropped + pending", st, n)
	}
	equalSeqs(t, "what the cap kept", span(401-uint64(n), 400), readAll(t, s, 0))
}

func TestOneAppenderAndOneReplayerAtOnce(t *testing.T) {
	const n = 5000
	cfg := testConfig(t)
	cfg.SegmentBytes = 64 << 10
	s, _ := mustOpen(t, cfg)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for seq := uint64(1); seq <= n; seq++ {
			if _, err := s.Append(payloadFor(seq)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	next := uint64(1)
	for deadline := time.Now().Add(20 * time.Second); next <= n && time.Now().Before(deadline); {
		recs, err := s.Read(0, 64)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Seq != next || !bytes.Equal(r.Payload, payloadFor(r.Seq)) {
				t.Fatalf("replayed record %d (%d bytes), want %d", r.Seq, len(r.Payload), next)
			}
			next++
		}
		if len(recs) > 0 {
			if err := s.Ack(recs[len(recs)-1].Seq); err != nil {
				t.Fatal(err)
			}
		} else {
			runtime.Gosched()
		}
	}
	wg.Wait()
	if next != n+1 {
		t.Fatalf("replayed up to %d of %d", next-1, n)
	}
	if r, _ := s.Pending(); r != 0 {
		t.Fatalf("%d records pending after replaying all", r)
	}
}

func TestMisuseGetsClearErrors(t *testing.T) {
	cfg := testConfig(t)
	s, _ := mustOpen(t, cfg)
	if _, err := s.Append(make([]byte, s.MaxPayload()+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Append of MaxPayload()+1 bytes: %v, want ErrTooLarge", err)
	}
	if _, err := s.Append(make([]byte, s.MaxPayload())); err != nil {
		t.Errorf("Append of MaxPayload() bytes: %v", err)
	}
	if recs, err := s.Read(0, math.MaxInt); err != nil || len(recs) != 1 {
		t.Errorf("Read(0, MaxInt) = %d records, %v; want the one", len(recs), err)
	}
	if err := s.Ack(2); !errors.Is(err, ErrAckBeyond) {
		t.Errorf("Ack(2) with one record: %v, want ErrAckBeyond", err)
	}
	if runtime.GOOS != "windows" {
		if _, _, err := Open(cfg, nil); !errors.Is(err, ErrLocked) {
			t.Errorf("a second Open of the same directory: %v, want ErrLocked", err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(0, 10); !errors.Is(err, ErrClosed) {
		t.Errorf("Read after Close: %v", err)
	}
	if _, err := s.Append(nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close: %v", err)
	}
	if err := s.Ack(1); !errors.Is(err, ErrClosed) {
		t.Errorf("Ack after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

func TestADroppedSegmentOutlivesItsReader(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxBytes = 8 << 10
	s, _ := mustOpen(t, cfg)
	appendN(t, s, 1, 3)
	s.mu.Lock()
	g := s.segs[0]
	g.readers++ // a Read in flight, as Read takes it
	s.mu.Unlock()
	appendN(t, s, 4, 40)
	if s.Stats().DroppedRecords == 0 {
		t.Fatal("nothing dropped")
	}
	if _, err := os.Stat(g.path); err != nil {
		t.Fatalf("the segment a reader holds was deleted under it: %v", err)
	}
	s.release(g, 0)
	if _, err := os.Stat(g.path); !os.IsNotExist(err) {
		t.Fatalf("the dropped segment survived its last reader: %v", err)
	}
}
