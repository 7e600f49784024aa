package spool

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// syncLoop fsyncs what was appended and acknowledged every FsyncInterval,
// without holding the lock Append takes. Close stops it. It ticks on the
// agent's grid (telemetry.UntilTick): the fsyncs share a wake-up with the
// exporter's writes; the first comes sooner than FsyncInterval, none later.
func (s *Spool) syncLoop() {
	defer close(s.done)
	t := time.NewTimer(telemetry.UntilTick(time.Now(), s.cfg.FsyncInterval))
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			t.Reset(telemetry.UntilTick(time.Now(), s.cfg.FsyncInterval))
			if err := s.syncNow(); err != nil {
				s.mu.Lock()
				s.stats.FsyncErrors++
				s.mu.Unlock()
				s.log.Error("spool: background fsync failed; records appended since the last good fsync may not survive a machine crash",
					"dir", s.cfg.Dir, "err", err)
			}
		}
	}
}

func (s *Spool) syncNow() error {
	s.mu.Lock()
	w, dirty, ackDirty := s.w, s.dirty, s.ackDirty
	s.dirty, s.ackDirty = false, false
	s.mu.Unlock()
	var errs []error
	// A rotation may close w meanwhile; it fsyncs it first.
	if dirty && w != nil {
		if err := s.fsync(w); err != nil && !errors.Is(err, os.ErrClosed) {
			errs = append(errs, fmt.Errorf("spool: fsync segment: %w", err))
		}
	}
	if ackDirty {
		if err := s.persistAck(false); err != nil {
			s.mu.Lock()
			s.ackDirty = true
			s.mu.Unlock()
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// fsync is f.Sync, timed into spikehunt_spool_fsync_duration_seconds.
func (s *Spool) fsync(f *os.File) error {
	start := time.Now()
	err := f.Sync()
	s.fsyncSeconds.Observe(time.Since(start).Seconds())
	return err
}

// syncDir makes segment creations, deletions and ack file renames durable.
func (s *Spool) syncDir() error {
	start := time.Now()
	err := syncDirectory(s.cfg.Dir)
	s.fsyncSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		return fmt.Errorf("spool: fsync directory %s: %w", s.cfg.Dir, err)
	}
	return nil
}
