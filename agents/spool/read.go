package spool

import (
	"fmt"
	"os"
)

// Read returns up to limit intact records with Seq >= from, oldest first;
// from == 0 means the first unacknowledged record. Records dropped by the
// cap or skipped as corrupt are absent, so Seq can jump. An empty result
// means nothing newer is spooled. Read reads the files outside the lock
// Append takes. The caller owns the payloads (they share one allocation per
// segment read).
func (s *Spool) Read(from uint64, limit int) ([]Record, error) {
	type span struct {
		g    *segment
		recs []entry
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if from == 0 {
		from = s.ack + 1
	}
	var plan []span
	n := 0
	for _, g := range s.segs {
		if n >= limit {
			break
		}
		if len(g.recs) == 0 || g.recs[len(g.recs)-1].seq < from {
			continue
		}
		i := g.search(from)
		j := i + min(len(g.recs)-i, limit-n)
		if g.r == nil {
			r, err := os.Open(g.path)
			if err != nil {
				s.mu.Unlock()
				for _, p := range plan {
					s.release(p.g, 0)
				}
				return nil, fmt.Errorf("spool: %w", err)
			}
			g.r = r
		}
		g.readers++
		plan = append(plan, span{g, g.recs[i:j:j]})
		n += j - i
	}
	s.mu.Unlock()

	out := make([]Record, 0, n)
	var err error
	for _, p := range plan {
		corrupt := 0
		if err == nil {
			out, corrupt, err = readSpan(p.g, p.recs, out)
		}
		s.release(p.g, corrupt)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// readSpan reads recs, consecutive records of g, with one ReadAt and
// checks each CRC again: the disk may have changed since Open.
func readSpan(g *segment, recs []entry, out []Record) ([]Record, int, error) {
	start := int64(recs[0].off)
	last := recs[len(recs)-1]
	buf := make([]byte, int64(last.off)+last.size()-start)
	if _, err := g.r.ReadAt(buf, start); err != nil {
		return out, 0, fmt.Errorf("spool: read %s: %w", g.path, err)
	}
	corrupt := 0
	for _, e := range recs {
		off := int64(e.off) - start
		payload, _, st := parseFrame(buf[off : off+e.size()])
		if st != frameOK || len(payload) != int(e.n) {
			corrupt++
			continue
		}
		out = append(out, Record{Seq: e.seq, Payload: payload})
	}
	return out, corrupt, nil
}

// release ends a Read's use of g; the last reader of a segment that left
// the spool meanwhile deletes its file.
func (s *Spool) release(g *segment, corrupt int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g.readers--
	s.stats.CorruptRecords += uint64(corrupt)
	if corrupt > 0 {
		s.log.Error("spool: records failed their CRC on read; skipped", "segment", g.path, "records", corrupt)
	}
	if g.readers > 0 {
		return
	}
	switch {
	case g.removed:
		if err := g.remove(); err != nil {
			s.log.Error("spool: delete a dropped segment", "err", err)
		} else if err := s.syncDir(); err != nil {
			s.log.Error("spool: fsync the spool directory", "err", err)
		}
	case s.closed && g.r != nil:
		g.r.Close()
		g.r = nil
	}
}
