package spool

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"time"
)

// Recovery is what Open found on disk. The agent reports it once at start.
type Recovery struct {
	Segments int    // segment files kept
	Records  int    // intact unacknowledged records, ready to replay
	Bytes    int64  // their frames' bytes
	AckedSeq uint64 // the persisted ack point: records up to it were delivered
	NextSeq  uint64 // what the next Append returns

	// CorruptRecords were skipped in the middle of a segment: a bad CRC,
	// or a damaged length that lost the framing until the next intact
	// record (counted once per damaged stretch); CorruptBytes is their
	// size.
	CorruptRecords int
	CorruptBytes   int64
	// TornRecords were cut off the tail of the last segment: the record
	// whose write was interrupted, plus any intact records behind a tail
	// the framing could not cross. TruncatedBytes is what was cut.
	TornRecords    int
	TruncatedBytes int64
	// AckLost says the ack file was missing while segments existed, or
	// unreadable: every record is replayed, some of them again.
	AckLost bool

	// Clean says the previous run closed the spool (or there was none).
	// After an unclean end (kill -9, crash, power loss), LossWindow is
	// the previous run's FsyncInterval: if the machine itself went down,
	// records appended in that window before the crash may be missing,
	// and acknowledgements made in it are replayed. A process kill alone
	// loses nothing Append returned.
	Clean      bool
	LossWindow time.Duration
}

const noLimit = math.MaxUint64

// segmentScan is what scanSegment found in one segment file.
type segmentScan struct {
	recs           []entry
	next           uint64 // sequence number after the segment's last record
	end            int    // bytes holding frames; the last segment is truncated here
	corrupt        int
	corruptBytes   int64
	torn           int
	truncatedBytes int64
}

// scanSegment decodes a segment file whose first record is base. limit is
// the next segment's base (noLimit for the last segment). It is pure, never
// panics on any input, and returns only records whose CRC matches.
//
// Numbering: each frame, intact or with a bad CRC, takes one sequence
// number. A stretch whose length field is damaged holds an unknown number of
// records; in a sealed segment the records after the last such stretch are
// numbered back from limit (the segment was complete when the next one
// started), so their numbers, and the ack point that refers to them, stay
// right. In the last segment the framing cannot be trusted past the damage
// and everything from there is cut.
func scanSegment(data []byte, base, limit uint64, last bool) segmentScan {
	var sc segmentScan
	seq, pos := base, 0
	resyncAt := -1 // index in sc.recs of the first record after a lost stretch
	for pos < len(data) {
		payload, size, st := parseFrame(data[pos:])
		if st == frameOK {
			sc.recs = append(sc.recs, entry{seq: seq, off: uint32(pos), n: uint32(len(payload))})
			seq, pos = seq+1, pos+size
			continue
		}
		tail := pos+size == len(data)
		if st == frameBadCRC && endsAtBoundary(data, pos+size) && !(last && tail) {
			sc.corrupt++
			sc.corruptBytes += int64(size)
			seq, pos = seq+1, pos+size
			continue
		}
		if last {
			sc.torn = 1 + countIntact(data, pos+1)
			sc.truncatedBytes = int64(len(data) - pos)
			break
		}
		q := resync(data, pos+1)
		sc.corrupt++
		sc.corruptBytes += int64(q - pos)
		seq, pos = seq+1, q
		resyncAt = len(sc.recs)
	}
	sc.end, sc.next = pos, seq
	if resyncAt >= 0 && limit != noLimit && seq < limit {
		shift := limit - seq
		for i := resyncAt; i < len(sc.recs); i++ {
			sc.recs[i].seq += shift
		}
		sc.next = limit
	}
	// Numbers at or past the next segment's first come only from damage.
	for len(sc.recs) > 0 && sc.recs[len(sc.recs)-1].seq >= limit {
		sc.corrupt++
		sc.corruptBytes += sc.recs[len(sc.recs)-1].size()
		sc.recs = sc.recs[:len(sc.recs)-1]
	}
	return sc
}

// resync returns the first offset at or after from where an intact frame
// starts and ends on a boundary, or len(data).
func resync(data []byte, from int) int {
	for from < len(data) {
		i := bytes.IndexByte(data[from:], recordMagic)
		if i < 0 {
			break
		}
		q := from + i
		if _, size, st := parseFrame(data[q:]); st == frameOK && endsAtBoundary(data, q+size) {
			return q
		}
		from = q + 1
	}
	return len(data)
}

// countIntact counts the intact frames found at or after from.
func countIntact(data []byte, from int) int {
	n := 0
	for q := resync(data, from); q < len(data); {
		if _, size, st := parseFrame(data[q:]); st == frameOK {
			n, q = n+1, q+size
		} else {
			q = resync(data, q+1)
		}
	}
	return n
}

// recover rebuilds the spool's state from cfg.Dir. On error the caller
// closes s.w.
func (s *Spool) recover() (Recovery, error) {
	var rec Recovery
	dir := s.cfg.Dir
	st, found, torn, err := readAckFile(dir)
	switch {
	case errors.Is(err, errAckDamaged):
		s.log.Warn("spool: ack file is damaged; replaying every record", "dir", dir, "err", err)
		rec.AckLost = true
	case err != nil:
		return rec, err
	case torn:
		s.log.Warn("spool: the ack file's last write was torn; using the one before it", "dir", dir, "acked_seq", st.ack)
	}
	s.ackGen = st.gen
	os.Remove(ackTmpPath(dir))

	bases, err := listSegments(dir)
	if err != nil {
		return rec, err
	}
	if !found && len(bases) > 0 {
		rec.AckLost = true
	}
	rec.Clean = st.clean || (!found && len(bases) == 0)
	if !rec.Clean {
		rec.LossWindow = time.Duration(st.fsyncInterval)
		if !found || rec.AckLost {
			rec.LossWindow = s.cfg.FsyncInterval
		}
	}

	next, fileSize := uint64(1), int64(0)
	for i, base := range bases {
		g := newSegment(dir, base)
		fi, err := os.Stat(g.path)
		if err != nil {
			return rec, fmt.Errorf("spool: %w", err)
		}
		if fi.Size() > maxSegmentBytes {
			return rec, fmt.Errorf("spool: %s is %d bytes, more than any segment the spool writes (%d): it is not a spool segment; move it out of %s",
				g.path, fi.Size(), int64(maxSegmentBytes), dir)
		}
		data, err := os.ReadFile(g.path)
		if err != nil {
			return rec, fmt.Errorf("spool: %w", err)
		}
		limit, last := uint64(noLimit), i == len(bases)-1
		if !last {
			limit = bases[i+1]
		}
		sc := scanSegment(data, base, limit, last)
		for _, e := range sc.recs {
			g.add(e)
		}
		g.size = int64(sc.end)
		if !last {
			g.size = int64(len(data))
		}
		rec.CorruptRecords += sc.corrupt
		rec.CorruptBytes += sc.corruptBytes
		rec.TornRecords += sc.torn
		rec.TruncatedBytes += sc.truncatedBytes
		s.segs = append(s.segs, g)
		s.bytes += g.size
		next, fileSize = sc.next, int64(len(data))
	}
	s.ack = st.ack
	s.next = max(next, s.ack+1)

	removed := false
	for len(s.segs) > 0 && s.segs[0].acked(s.ack) {
		if err := s.segs[0].remove(); err != nil {
			return rec, err
		}
		s.bytes -= s.segs[0].size
		s.segs, removed = s.segs[1:], true
	}
	if len(s.segs) > 0 {
		g := s.segs[len(s.segs)-1]
		w, err := os.OpenFile(g.path, os.O_RDWR, 0)
		if err != nil {
			return rec, fmt.Errorf("spool: %w", err)
		}
		s.w = w
		if g.size < fileSize {
			if err := w.Truncate(g.size); err != nil {
				return rec, fmt.Errorf("spool: truncate the torn tail of %s: %w", g.path, err)
			}
			if err := s.fsync(w); err != nil {
				return rec, fmt.Errorf("spool: fsync %s: %w", g.path, err)
			}
		}
	}
	// A smaller MaxBytes than the previous run's applies now.
	for s.bytes > s.cfg.MaxBytes && len(s.segs) > 1 {
		if err := s.dropOldest(); err != nil {
			return rec, err
		}
		removed = true
	}
	if removed {
		if err := s.syncDir(); err != nil {
			return rec, err
		}
	}

	rec.Segments = len(s.segs)
	rec.Records, rec.Bytes = s.pendingLocked()
	rec.AckedSeq, rec.NextSeq = s.ack, s.next
	s.stats.CorruptRecords = uint64(rec.CorruptRecords + rec.TornRecords)
	return rec, nil
}
