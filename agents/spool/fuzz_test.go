package spool

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// FuzzRecovery opens a spool whose first segment holds arbitrary bytes,
// either as the last segment or sealed by a second, intact one. Open must
// succeed, Read must return only payloads that sit in an intact frame of the
// input under a consistent number, and a second Open must find the same.
func FuzzRecovery(f *testing.F) {
	abc := frames("alpha", "bravo", "charlie", "delta")
	for _, seed := range [][]byte{
		nil, abc, abc[:len(abc)-4], damage(abc, 20, 1), damage(abc, 18, 0x80), damage(abc, 0, 0xff),
		append(frames("alpha"), make([]byte, 64)...), []byte("not a spool segment"),
		bytes.Repeat([]byte{recordMagic}, 40), append(frames(""), frames("x")...),
	} {
		f.Add(seed, false, uint8(0))
		f.Add(seed, true, uint8(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, sealed bool, gap uint8) {
		cfg := Config{Dir: memTempDir(t), MaxBytes: 1 << 30, FsyncInterval: time.Minute}
		if err := os.WriteFile(filepath.Join(cfg.Dir, segmentName(1)), data, 0o640); err != nil {
			t.Fatal(err)
		}
		second := uint64(2) + uint64(gap)
		if sealed {
			err := os.WriteFile(filepath.Join(cfg.Dir, segmentName(second)), appendFrame(nil, payloadFor(second)), 0o640)
			if err != nil {
				t.Fatal(err)
			}
		}
		read := func() []Record {
			s, rec, err := Open(cfg, nil)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer s.Close()
			recs, err := s.Read(1, 1<<30)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != rec.Records {
				t.Fatalf("Read returned %d records, Recovery says %d", len(recs), rec.Records)
			}
			for i, r := range recs {
				if i > 0 && r.Seq <= recs[i-1].Seq {
					t.Fatalf("record %d after %d", r.Seq, recs[i-1].Seq)
				}
				if sealed && r.Seq >= second {
					if r.Seq != second || !bytes.Equal(r.Payload, payloadFor(second)) {
						t.Fatalf("record %d: not the second segment's record", r.Seq)
					}
					continue
				}
				e := s.segs[0].recs[s.segs[0].search(r.Seq)]
				payload, _, st := parseFrame(data[e.off:])
				if e.seq != r.Seq || st != frameOK || !bytes.Equal(payload, r.Payload) {
					t.Fatalf("record %d: its payload is not an intact frame of the input at offset %d", r.Seq, e.off)
				}
			}
			return recs
		}
		first, again := read(), read()
		if !slices.EqualFunc(first, again, func(a, b Record) bool { return a.Seq == b.Seq && bytes.Equal(a.Payload, b.Payload) }) {
			t.Fatalf("a second Open read %d records, the first %d, or under other numbers", len(again), len(first))
		}
	})
}

// memTempDir is a temporary directory on tmpfs when there is one: each Open
// and Close fsyncs several times, which on a busy disk slows the fuzzer to a
// few runs per second, and this test is about decoding, not durability.
func memTempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("/dev/shm", "spool-fuzz-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
