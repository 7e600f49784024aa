package spool

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// crash ends s the way kill -9 would: no fsync, no clean mark, lock released.
func crash(t testing.TB, s *Spool) {
	t.Helper()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	if s.stop != nil {
		close(s.stop)
		<-s.done
	}
	if s.w != nil {
		s.w.Close()
	}
	if s.ackFile != nil {
		s.ackFile.Close()
	}
	if err := s.unlock(); err != nil {
		t.Fatal(err)
	}
}

// After Open, the ack point is written into the same file, alternating
// between its two slots; a crash then finds the last one written.
func TestTheAckPointIsWrittenInPlace(t *testing.T) {
	cfg := testConfig(t)
	s, _ := mustOpen(t, cfg)
	path := filepath.Join(cfg.Dir, ackFileName)
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, s, 1, 300)
	for _, ack := range []uint64{100, 150, 200} {
		if err := s.Ack(ack); err != nil {
			t.Fatal(err)
		}
		if err := s.syncNow(); err != nil {
			t.Fatal(err)
		}
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) || after.Size() != ackFileSize {
		t.Errorf("the ack file was replaced or resized (%d bytes): want writes in place", after.Size())
	}
	crash(t, s)
	_, rec := mustOpen(t, cfg)
	if rec.AckedSeq != 200 || rec.Clean || rec.AckLost {
		t.Fatalf("after a crash: %+v, want ack point 200, unclean", rec)
	}
}

func TestAnUncleanEndReportsTheLossWindow(t *testing.T) {
	cfg := testConfig(t)
	s, _ := mustOpen(t, cfg)
	appendN(t, s, 1, 300)
	if err := s.Ack(100); err != nil {
		t.Fatal(err)
	}
	// The ack point is persisted by the background fsync; wait for one.
	time.Sleep(3 * cfg.FsyncInterval)
	crash(t, s)

	cfg.FsyncInterval = time.Second // the loss window is the previous run's
	s, rec := mustOpen(t, cfg)
	if rec.Clean || rec.LossWindow != 50*time.Millisecond || rec.AckedSeq != 100 || rec.Records != 200 {
		t.Fatalf("after a crash: %+v", rec)
	}
	equalSeqs(t, "after a crash", span(101, 300), readAll(t, s, 0))
}

func TestFsyncEveryAppend(t *testing.T) {
	cfg := testConfig(t)
	cfg.FsyncInterval = 0
	s, _ := mustOpen(t, cfg)
	appendN(t, s, 1, 20)
	if err := s.Ack(5); err != nil {
		t.Fatal(err)
	}
	crash(t, s) // nothing was left to a background fsync
	_, rec := mustOpen(t, cfg)
	if rec.AckedSeq != 5 || rec.Records != 15 || rec.LossWindow != 0 || rec.Clean {
		t.Fatalf("%+v", rec)
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, "ack.tmp")); !os.IsNotExist(err) {
		t.Errorf("ack.tmp left behind: %v", err)
	}
}

func TestASmallerCapAppliesOnReopen(t *testing.T) {
	cfg := testConfig(t)
	s, _ := mustOpen(t, cfg)
	appendN(t, s, 1, 200)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.MaxBytes = 16 << 10
	s, rec := mustOpen(t, cfg)
	st := s.Stats()
	if st.Bytes > cfg.MaxBytes || st.DroppedRecords == 0 || uint64(rec.Records)+st.DroppedRecords != 200 {
		t.Fatalf("reopened under a smaller cap: %+v, %+v", rec, st)
	}
	equalSeqs(t, "what the smaller cap kept", span(201-uint64(rec.Records), 200), readAll(t, s, 0))
}
