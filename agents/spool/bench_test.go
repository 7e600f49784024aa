package spool

import (
	"testing"
	"time"
)

// BenchmarkAppend appends 1 KiB records with the default configuration
// (1 s fsync interval, 8 MiB segments, 256 MiB cap): once past the cap,
// each segment rotation also drops the oldest.
func BenchmarkAppend(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Dir = b.TempDir()
	s, _ := mustOpen(b, cfg)
	p := make([]byte, 1024)
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Append(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendFsyncEach is the price of FsyncInterval = 0.
func BenchmarkAppendFsyncEach(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Dir, cfg.FsyncInterval = b.TempDir(), 0
	s, _ := mustOpen(b, cfg)
	p := make([]byte, 1024)
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Append(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplay reads and acknowledges 1 KiB records in batches of 100,
// as the replayer does after an outage.
func BenchmarkReplay(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Dir, cfg.MaxBytes = b.TempDir(), 64<<30
	cfg.FsyncInterval = time.Second
	s, _ := mustOpen(b, cfg)
	p := make([]byte, 1024)
	for range b.N {
		if _, err := s.Append(p); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		recs, err := s.Read(0, 100)
		if err != nil || len(recs) == 0 {
			b.Fatalf("Read after %d of %d: %d records, %v", done, b.N, len(recs), err)
		}
		if err := s.Ack(recs[len(recs)-1].Seq); err != nil {
			b.Fatal(err)
		}
		done += len(recs)
	}
}
