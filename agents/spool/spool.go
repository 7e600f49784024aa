package spool

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	// ErrClosed is returned by every call after Close.
	ErrClosed = errors.New("spool: closed")
	// ErrTooLarge is returned by Append for a record that does not fit in
	// one segment: split the export request or raise SegmentBytes.
	ErrTooLarge = errors.New("spool: record larger than a segment")
	// ErrAckBeyond is returned by Ack for a sequence number no Append has
	// returned yet.
	ErrAckBeyond = errors.New("spool: ack beyond the last appended record")
	// ErrLocked is returned by Open when another Spool holds the directory.
	ErrLocked = errors.New("spool: directory in use by another spool")
)

// Record is one spooled record.
type Record struct {
	Seq     uint64
	Payload []byte
}

// Stats counts what the spool did since Open.
type Stats struct {
	Appended       uint64 // records appended
	Acked          uint64 // intact records acknowledged
	DroppedRecords uint64 // unacknowledged records dropped to stay under MaxBytes
	DroppedBytes   int64  // their frames' bytes
	CorruptRecords uint64 // Recovery.CorruptRecords + TornRecords, plus records that failed their CRC on Read
	FsyncErrors    uint64 // failed background fsyncs (FsyncInterval > 0); each is also logged
	Bytes          int64  // size of the segment files now
}

// Spool is a durable FIFO of byte records in a directory. Append, Read, Ack
// and the query methods are safe for concurrent use; the usual shape is one
// appending goroutine (the exporter during an outage) and one replaying
// goroutine (Read, deliver, Ack). Close it: it fsyncs and releases the
// directory lock; with FsyncInterval > 0 it also stops the goroutine that
// fsyncs in the background.
type Spool struct {
	cfg    Config
	log    *slog.Logger
	unlock func() error // releases the directory lock

	ackMu   sync.Mutex // serializes ack file writes; taken before mu
	ackFile *os.File   // the ack file, written in place; nil until Open writes it (ackMu)
	ackGen  uint64     // generation of the last ack file write (ackMu)

	mu       sync.Mutex
	segs     []*segment // oldest first
	w        *os.File   // write handle of segs[len-1]; nil until the next Append creates a segment
	buf      []byte     // the frame being written
	next     uint64     // sequence number of the next Append
	ack      uint64     // last acknowledged sequence number
	bytes    int64      // sum of segs' sizes
	dirty    bool       // appended since the last fsync
	ackDirty bool       // acknowledged since the ack file was written
	closed   bool
	stats    Stats

	fsyncSeconds prometheus.Histogram
	stop, done   chan struct{}
}

// Open recovers the spool in cfg.Dir, creating the directory if needed,
// and takes an exclusive lock on it. Damaged records are skipped or cut and
// counted in Recovery, never returned; Open fails only on I/O errors and on
// files it cannot have written. A nil logger discards.
func Open(cfg Config, logger *slog.Logger) (*Spool, Recovery, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, Recovery{}, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return nil, Recovery{}, fmt.Errorf("spool: %w", err)
	}
	unlock, err := lockDir(cfg.Dir)
	if err != nil {
		return nil, Recovery{}, err
	}
	s := &Spool{cfg: cfg, log: logger, unlock: unlock, fsyncSeconds: newFsyncHistogram()}
	rec, err := s.recover()
	if err == nil {
		// Mark the run unclean until Close says otherwise.
		err = s.persistAck(false)
	}
	if err != nil {
		if s.w != nil {
			s.w.Close()
		}
		s.closeAckFile()
		unlock()
		return nil, rec, err
	}
	if cfg.FsyncInterval > 0 {
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.syncLoop()
	}
	logger.Info("spool: opened", "dir", cfg.Dir, "segments", rec.Segments, "records", rec.Records,
		"bytes", rec.Bytes, "acked_seq", rec.AckedSeq, "next_seq", rec.NextSeq, "clean", rec.Clean)
	if !rec.Clean || rec.CorruptRecords > 0 || rec.TornRecords > 0 || rec.AckLost {
		logger.Warn("spool: recovered after an unclean end", "dir", cfg.Dir,
			"loss_window", rec.LossWindow, "corrupt_records", rec.CorruptRecords, "corrupt_bytes", rec.CorruptBytes,
			"torn_records", rec.TornRecords, "truncated_bytes", rec.TruncatedBytes, "ack_lost", rec.AckLost)
	}
	return s, rec, nil
}

// MaxPayload is the largest payload Append accepts.
func (s *Spool) MaxPayload() int { return int(s.cfg.SegmentBytes) - headerSize }

// Ack records that every record up to seq was delivered. It frees the
// segments whose records are all acknowledged (not the one being written)
// and persists the ack point: at once when FsyncInterval is 0, else with
// the next background fsync. Acking an older seq than before is a no-op.
func (s *Spool) Ack(seq uint64) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if seq <= s.ack {
		s.mu.Unlock()
		return nil
	}
	if seq >= s.next {
		s.mu.Unlock()
		return fmt.Errorf("%w: ack %d, last appended %d", ErrAckBeyond, seq, s.next-1)
	}
	for _, g := range s.segs {
		if g.base > seq {
			break
		}
		s.stats.Acked += uint64(g.search(seq+1) - g.search(s.ack+1))
	}
	s.ack = seq
	var errs []error
	freed := false
	for len(s.segs) > 0 && s.segs[0].acked(seq) && !(len(s.segs) == 1 && s.w != nil) {
		errs = append(errs, s.retire(s.segs[0]))
		s.segs, freed = s.segs[1:], true
	}
	if freed {
		errs = append(errs, s.syncDir())
	}
	s.ackDirty = true
	now := s.cfg.FsyncInterval == 0
	s.mu.Unlock()
	if now {
		errs = append(errs, s.persistAck(false))
	}
	return errors.Join(errs...)
}

// retire takes g out of the spool's size and deletes its file, or leaves
// that to its last reader. The caller removes g from s.segs and fsyncs the
// directory.
func (s *Spool) retire(g *segment) error {
	s.bytes -= g.size
	g.removed = true
	if g.readers > 0 {
		return nil
	}
	return g.remove()
}

// Pending returns the unacknowledged records and their frames' bytes.
func (s *Spool) Pending() (records int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pendingLocked()
}

func (s *Spool) pendingLocked() (records int, bytes int64) {
	for _, g := range s.segs {
		n, b := g.after(s.ack)
		records, bytes = records+n, bytes+b
	}
	return records, bytes
}

// Stats returns the counters since Open and the current size.
func (s *Spool) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Bytes = s.bytes
	return st
}

// Close fsyncs the active segment and the ack point, marks the spool closed
// cleanly and releases the directory. Later calls return ErrClosed; a
// second Close returns nil.
func (s *Spool) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	if s.stop != nil {
		close(s.stop)
		<-s.done
	}

	var errs []error
	s.mu.Lock()
	if s.w != nil {
		if err := s.fsync(s.w); err != nil {
			errs = append(errs, fmt.Errorf("spool: fsync on close: %w", err))
		}
		errs = append(errs, s.w.Close())
		s.w = nil
	}
	for _, g := range s.segs {
		if g.readers == 0 && g.r != nil {
			g.r.Close()
			g.r = nil
		}
	}
	s.mu.Unlock()
	errs = append(errs, s.persistAck(errors.Join(errs...) == nil))
	errs = append(errs, s.closeAckFile(), s.unlock())
	return errors.Join(errs...)
}
