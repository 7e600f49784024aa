package spool

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func frames(payloads ...string) []byte {
	var b []byte
	for _, p := range payloads {
		b = appendFrame(b, []byte(p))
	}
	return b
}

// damage returns data with b XORed into the byte at off.
func damage(data []byte, off int, b byte) []byte {
	d := append([]byte(nil), data...)
	d[off] ^= b
	return d
}

func TestScanSegment(t *testing.T) {
	abc := frames("alpha", "bravo", "charlie")
	second := len(frames("alpha")) // offset of "bravo"
	type result struct {
		Seqs                         []uint64
		Next                         uint64
		End, Corrupt, Torn           int
		CorruptBytes, TruncatedBytes int64
	}
	tests := []struct {
		name  string
		data  []byte
		limit uint64
		last  bool
		want  result
	}{
		{name: "an empty segment holds nothing", data: nil, last: true, want: result{Next: 7}},
		{name: "intact records are numbered from the name", data: abc, last: true,
			want: result{Seqs: []uint64{7, 8, 9}, Next: 10, End: len(abc)}},
		{name: "a bad CRC in the middle skips that record's number", data: damage(abc, second+10, 1), last: true,
			want: result{Seqs: []uint64{7, 9}, Next: 10, End: len(abc), Corrupt: 1, CorruptBytes: 14}},
		{name: "a bad CRC at the end of a sealed segment is skipped", data: damage(abc, len(abc)-1, 1), limit: 10,
			want: result{Seqs: []uint64{7, 8}, Next: 10, End: len(abc), Corrupt: 1, CorruptBytes: 16}},
		{name: "a bad CRC at the end of the last segment is a torn write", data: damage(abc, len(abc)-1, 1), last: true,
			want: result{Seqs: []uint64{7, 8}, Next: 9, End: len(abc) - 16, Torn: 1, TruncatedBytes: 16}},
		{name: "a frame cut short is a torn write", data: abc[:len(abc)-3], last: true,
			want: result{Seqs: []uint64{7, 8}, Next: 9, End: len(abc) - 16, Torn: 1, TruncatedBytes: 13}},
		{name: "zeros after the records are cut", data: append(frames("alpha"), make([]byte, 100)...), last: true,
			want: result{Seqs: []uint64{7}, Next: 8, End: 14, Torn: 1, TruncatedBytes: 100}},
		{name: "a damaged length in the last segment cuts the rest, counting the intact records lost",
			data: damage(abc, second+4, 0x80), last: true,
			want: result{Seqs: []uint64{7}, Next: 8, End: second, Torn: 2, TruncatedBytes: int64(len(abc) - second)}},
		{name: "a damaged length in a sealed segment: the records after it are numbered back from the next segment",
			data: damage(frames("alpha", "bravo", "charlie", "delta"), second+4, 0x80), limit: 11,
			want: result{Seqs: []uint64{7, 9, 10}, Next: 11, End: len(frames("alpha", "bravo", "charlie", "delta")), Corrupt: 1, CorruptBytes: 14}},
		{name: "numbers that reach the next segment's are dropped", data: abc, limit: 9,
			want: result{Seqs: []uint64{7, 8}, Next: 10, End: len(abc), Corrupt: 1, CorruptBytes: 16}},
		{name: "garbage without a frame is one corrupt stretch", data: []byte("not a spool segment"), limit: 8,
			want: result{Next: 8, End: 19, Corrupt: 1, CorruptBytes: 19}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			limit := tt.limit
			if tt.last {
				limit = noLimit
			}
			sc := scanSegment(tt.data, 7, limit, tt.last)
			got := result{Next: sc.next, End: sc.end, Corrupt: sc.corrupt, Torn: sc.torn,
				CorruptBytes: sc.corruptBytes, TruncatedBytes: sc.truncatedBytes}
			for _, e := range sc.recs {
				got.Seqs = append(got.Seqs, e.seq)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("scanSegment (-want +got):\n%s", diff)
			}
		})
	}
}

// spooled is a closed spool of records 1..n and where each record is.
type spooled struct {
	cfg  Config
	n    uint64
	segs []*segment // path and recs only
}

// lastOf is the last record of segment i: an ack point there frees
// segments 0 to i and no more.
func (sp spooled) lastOf(i int) uint64 {
	g := sp.segs[i]
	return g.recs[len(g.recs)-1].seq
}

func (sp spooled) flip(t *testing.T, seg, rec, at int, b byte) uint64 {
	t.Helper()
	g := sp.segs[seg]
	data, err := os.ReadFile(g.path)
	if err != nil {
		t.Fatal(err)
	}
	e := g.recs[rec]
	if err := os.WriteFile(g.path, damage(data, int(e.off)+at, b), 0o640); err != nil {
		t.Fatal(err)
	}
	return e.seq
}

func newSpooled(t *testing.T, n uint64) spooled {
	cfg := testConfig(t)
	s, _ := mustOpen(t, cfg)
	appendN(t, s, 1, n)
	sp := spooled{cfg: cfg, n: n, segs: s.segs}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return sp
}

func TestReopeningDamagedFiles(t *testing.T) {
	type outcome struct {
		Missing                   []uint64
		Next                      uint64
		Corrupt, Torn             int
		CorruptBytes, Truncated   int64
		AckLost, Clean, Reentered bool
	}
	const n = 150
	tests := []struct {
		name   string
		damage func(t *testing.T, sp spooled) outcome
	}{
		{"a torn tail is cut", func(t *testing.T, sp spooled) outcome {
			g := sp.segs[len(sp.segs)-1]
			if err := os.Truncate(g.path, g.size-5); err != nil {
				t.Fatal(err)
			}
			last := g.recs[len(g.recs)-1]
			return outcome{Missing: []uint64{n}, Next: n, Torn: 1, Truncated: last.size() - 5, Clean: true}
		}},
		{"a flipped payload byte in a sealed segment skips that record", func(t *testing.T, sp spooled) outcome {
			seq := sp.flip(t, 3, 1, headerSize+20, 0x10)
			return outcome{Missing: []uint64{seq}, Next: n + 1, Corrupt: 1, CorruptBytes: int64(headerSize + len(payloadFor(seq))), Clean: true}
		}},
		{"a flipped payload byte in the middle of the last segment skips that record", func(t *testing.T, sp spooled) outcome {
			seq := sp.flip(t, len(sp.segs)-1, 0, headerSize+1, 0x01)
			return outcome{Missing: []uint64{seq}, Next: n + 1, Corrupt: 1, CorruptBytes: int64(headerSize + len(payloadFor(seq))), Clean: true}
		}},
		{"a damaged length in a sealed segment keeps the numbers of the records after it", func(t *testing.T, sp spooled) outcome {
			seq := sp.flip(t, 5, 0, 4, 0x80)
			return outcome{Missing: []uint64{seq}, Next: n + 1, Corrupt: 1, CorruptBytes: int64(headerSize + len(payloadFor(seq))), Clean: true}
		}},
		{"a damaged length in the last segment cuts the rest of it", func(t *testing.T, sp spooled) outcome {
			g := sp.segs[len(sp.segs)-1]
			first := sp.flip(t, len(sp.segs)-1, 0, 4, 0x80)
			return outcome{Missing: span(first, n), Next: first, Torn: len(g.recs), Truncated: g.size, Clean: true}
		}},
		{"zeros after the last record (a power cut extended the file) are cut", func(t *testing.T, sp spooled) outcome {
			g := sp.segs[len(sp.segs)-1]
			if err := os.Truncate(g.path, g.size+4096); err != nil {
				t.Fatal(err)
			}
			return outcome{Next: n + 1, Torn: 1, Truncated: 4096, Clean: true}
		}},
		{"a damaged ack file replays everything", func(t *testing.T, sp spooled) outcome {
			if err := os.WriteFile(filepath.Join(sp.cfg.Dir, ackFileName), []byte("SPAK garbage"), 0o640); err != nil {
				t.Fatal(err)
			}
			return outcome{Next: n + 1, AckLost: true}
		}},
		{"an ack point past the records (acked, then lost in a crash) is kept", func(t *testing.T, sp spooled) outcome {
			writeAckSlots(t, sp.cfg.Dir, ackState{ack: n + 10, clean: true, gen: 7}, nil)
			return outcome{Missing: span(1, n), Next: n + 11, Clean: true}
		}},
		{"the ack file of earlier agents (version 1) is read", func(t *testing.T, sp spooled) outcome {
			ack := sp.lastOf(1)
			if err := os.WriteFile(filepath.Join(sp.cfg.Dir, ackFileName), encodeAckV1(ackState{ack: ack, clean: true}), 0o640); err != nil {
				t.Fatal(err)
			}
			return outcome{Missing: span(1, ack), Next: n + 1, Clean: true}
		}},
		{"of two ack slots the later write counts", func(t *testing.T, sp spooled) outcome {
			older, newer := ackState{ack: sp.lastOf(1), gen: 8}, ackState{ack: sp.lastOf(3), clean: true, gen: 9}
			writeAckSlots(t, sp.cfg.Dir, newer, &older)
			return outcome{Missing: span(1, newer.ack), Next: n + 1, Clean: true}
		}},
		{"a torn ack slot leaves the one written before it", func(t *testing.T, sp spooled) outcome {
			older, torn := ackState{ack: sp.lastOf(1), clean: true, gen: 8}, ackState{ack: sp.lastOf(3), gen: 9}
			writeAckSlots(t, sp.cfg.Dir, torn, &older)
			f, err := os.OpenFile(filepath.Join(sp.cfg.Dir, ackFileName), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte{0xff, 0xff}, ackSlotOffset(torn.gen)+8); err != nil { // half of the new ack point
				t.Fatal(err)
			}
			return outcome{Missing: span(1, older.ack), Next: n + 1, Clean: true}
		}},
		{"files that are not segments are left alone", func(t *testing.T, sp spooled) outcome {
			for _, name := range []string{"notes.txt", "1.seg", "0000000000000000000x.seg"} {
				if err := os.WriteFile(filepath.Join(sp.cfg.Dir, name), []byte("hello"), 0o640); err != nil {
					t.Fatal(err)
				}
			}
			return outcome{Next: n + 1, Clean: true}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := newSpooled(t, n)
			want := tt.damage(t, sp)
			want.Reentered = true
			s, rec := mustOpen(t, sp.cfg)
			got := outcome{Next: rec.NextSeq, Corrupt: rec.CorruptRecords, Torn: rec.TornRecords,
				CorruptBytes: rec.CorruptBytes, Truncated: rec.TruncatedBytes, AckLost: rec.AckLost, Clean: rec.Clean}
			read := readAll(t, s, 1)
			present := map[uint64]bool{}
			for _, seq := range read {
				present[seq] = true
			}
			for seq := uint64(1); seq <= n; seq++ {
				if !present[seq] {
					got.Missing = append(got.Missing, seq)
				}
			}
			if seq, err := s.Append(payloadFor(rec.NextSeq)); err != nil || seq != rec.NextSeq {
				t.Errorf("Append after recovery = %d, %v; want %d", seq, err, rec.NextSeq)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			// Recovery repaired what it could: the next Open finds the same
			// records under the same numbers, plus the new one.
			s, _ = mustOpen(t, sp.cfg)
			again := readAll(t, s, 1)
			got.Reentered = len(again) == len(read)+1 && slices.Equal(again[:len(read)], read)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("reopened (-want +got):\n%s", diff)
			}
		})
	}
}

// writeAckSlots replaces the ack file with st in its slot and, unless
// other is nil, other in the other slot.
func writeAckSlots(t *testing.T, dir string, st ackState, other *ackState) {
	t.Helper()
	b := make([]byte, ackFileSize)
	copy(b[ackSlotOffset(st.gen):], encodeAckSlot(st))
	if other != nil {
		copy(b[ackSlotOffset(other.gen):], encodeAckSlot(*other))
	}
	if err := os.WriteFile(filepath.Join(dir, ackFileName), b, 0o640); err != nil {
		t.Fatal(err)
	}
}
