package spool

import (
	"errors"
	"fmt"
	"os"
)

// maxKeptBuf bounds the frame buffer the spool keeps between Appends, so one
// huge record does not pin its size in memory.
const maxKeptBuf = 1 << 20

// Append writes payload as the next record and returns its sequence number.
// The record is in the kernel when Append returns, so a killed process does
// not lose it; it is on disk after the next fsync (at once when
// FsyncInterval is 0). When the spool would pass MaxBytes, Append first
// drops the oldest segments, acknowledged or not, counting the
// unacknowledged records in Stats.DroppedRecords: it never waits for a
// reader. On error the record is not in the spool. Append does not keep
// payload.
func (s *Spool) Append(payload []byte) (uint64, error) {
	size := int64(headerSize + len(payload))
	if size > s.cfg.SegmentBytes {
		return 0, fmt.Errorf("%w: %d-byte payload, at most %d (SegmentBytes − %d)", ErrTooLarge, len(payload), s.MaxPayload(), headerSize)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	if s.w == nil || s.segs[len(s.segs)-1].size+size > s.cfg.SegmentBytes {
		if err := s.rotate(); err != nil {
			return 0, err
		}
	}
	if s.bytes+size > s.cfg.MaxBytes {
		var errs []error
		for s.bytes+size > s.cfg.MaxBytes && len(s.segs) > 1 {
			errs = append(errs, s.dropOldest())
		}
		if err := errors.Join(append(errs, s.syncDir())...); err != nil {
			return 0, err
		}
	}

	g := s.segs[len(s.segs)-1]
	s.buf = appendFrame(s.buf[:0], payload)
	_, err := s.w.WriteAt(s.buf, g.size)
	if err == nil && s.cfg.FsyncInterval == 0 {
		err = s.fsync(s.w)
	}
	if cap(s.buf) > maxKeptBuf {
		s.buf = nil
	}
	if err != nil {
		// Cut what part of the frame got written, so that the next record
		// starts on a frame boundary.
		return 0, errors.Join(fmt.Errorf("spool: append to %s: %w", g.path, err), s.w.Truncate(g.size))
	}
	s.dirty = s.cfg.FsyncInterval > 0

	seq := s.next
	g.add(entry{seq: seq, off: uint32(g.size), n: uint32(len(payload))})
	g.size += size
	s.bytes += size
	s.next++
	s.stats.Appended++
	return seq, nil
}

// rotate seals the active segment (fsynced, so that a sealed segment is
// always complete on disk) and starts a new one named after the next
// sequence number.
func (s *Spool) rotate() error {
	if s.w != nil {
		if err := s.fsync(s.w); err != nil {
			return fmt.Errorf("spool: fsync %s: %w", s.segs[len(s.segs)-1].path, err)
		}
		s.dirty = false
		if err := s.w.Close(); err != nil {
			return fmt.Errorf("spool: %w", err)
		}
		s.w = nil
	}
	g := newSegment(s.cfg.Dir, s.next)
	f, err := os.OpenFile(g.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return fmt.Errorf("spool: new segment: %w", err)
	}
	if err := s.syncDir(); err != nil {
		f.Close()
		os.Remove(g.path)
		return err
	}
	s.w = f
	s.segs = append(s.segs, g)
	return nil
}

// dropOldest drops the oldest segment to make room, counting its
// unacknowledged records. The caller fsyncs the directory.
func (s *Spool) dropOldest() error {
	g := s.segs[0]
	n, b := g.after(s.ack)
	s.stats.DroppedRecords += uint64(n)
	s.stats.DroppedBytes += b
	s.segs = s.segs[1:]
	if n > 0 {
		s.log.Warn("spool: full; dropped the oldest unacknowledged records", "max_bytes", s.cfg.MaxBytes,
			"segment", g.path, "records", n, "bytes", b, "dropped_records_total", s.stats.DroppedRecords)
	}
	return s.retire(g)
}
