package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The ack file holds the ack point and how the last run ended. It has two
// slots, at offsets 0 and ackSlotStride, each:
//
//	[0:4]   "SPAK"
//	[4]     version, 2
//	[5]     flags: bit 0 = closed cleanly
//	[6:14]  last acknowledged sequence number, u64
//	[14:22] the writer's FsyncInterval in nanoseconds, u64
//	[22:30] generation, u64: the slot written last has the higher one
//	[30:34] CRC-32C of [0:30]
//
// integers little-endian; the rest of the file is zeros. Open writes a
// whole new file (ack.tmp, fsynced, renamed over ack, directory fsynced);
// after that each write overwrites the older slot in place and fsyncs the
// file. Replacing the file every FsyncInterval allocated an inode each
// time, and with the directory fsync that was most of the spool's CPU
// when nothing else was written. The slots are a page apart, so writing
// one never rewrites the other: a write torn by a machine crash damages
// only its own slot, and the other, one write older, is read instead (its
// records are replayed again, as after any crash).
//
// Version 1, the single-slot 26-byte file of earlier agents ([0:22] as
// above, the CRC at [22:26]), is still read; Open replaces it.
const (
	ackFileName   = "ack"
	ackSlotSize   = 34
	ackSlotStride = 4096
	ackFileSize   = 2 * ackSlotStride
	ackVersion    = 2
	ackClean      = 1 << 0

	ackV1Size    = 26
	ackV1Version = 1
)

var (
	ackMagic      = [4]byte{'S', 'P', 'A', 'K'}
	errAckDamaged = errors.New("spool: ack file damaged")
)

type ackState struct {
	ack           uint64
	fsyncInterval uint64 // nanoseconds
	clean         bool
	gen           uint64 // 0 in a version 1 file
}

func ackTmpPath(dir string) string { return filepath.Join(dir, ackFileName+".tmp") }

// ackSlotOffset is where the write of generation gen goes: the slots take
// turns.
func ackSlotOffset(gen uint64) int64 { return int64(gen%2) * ackSlotStride }

func encodeAckSlot(st ackState) []byte {
	b := make([]byte, ackSlotSize)
	copy(b, ackMagic[:])
	b[4] = ackVersion
	if st.clean {
		b[5] = ackClean
	}
	binary.LittleEndian.PutUint64(b[6:14], st.ack)
	binary.LittleEndian.PutUint64(b[14:22], st.fsyncInterval)
	binary.LittleEndian.PutUint64(b[22:30], st.gen)
	binary.LittleEndian.PutUint32(b[30:34], frameCRC(b[:30], nil))
	return b
}

func decodeAckSlot(b []byte) (ackState, bool) {
	if [4]byte(b[:4]) != ackMagic || b[4] != ackVersion || binary.LittleEndian.Uint32(b[30:34]) != frameCRC(b[:30], nil) {
		return ackState{}, false
	}
	return ackState{
		ack:           binary.LittleEndian.Uint64(b[6:14]),
		fsyncInterval: binary.LittleEndian.Uint64(b[14:22]),
		clean:         b[5]&ackClean != 0,
		gen:           binary.LittleEndian.Uint64(b[22:30]),
	}, true
}

// encodeAckV1 is the version 1 file, for tests of reading it.
func encodeAckV1(st ackState) []byte {
	b := make([]byte, ackV1Size)
	copy(b, ackMagic[:])
	b[4] = ackV1Version
	if st.clean {
		b[5] = ackClean
	}
	binary.LittleEndian.PutUint64(b[6:14], st.ack)
	binary.LittleEndian.PutUint64(b[14:22], st.fsyncInterval)
	binary.LittleEndian.PutUint32(b[22:26], frameCRC(b[:22], nil))
	return b
}

// decodeAck reads either version; torn says one slot was damaged and the
// other, older one was used.
func decodeAck(b []byte) (st ackState, torn bool, err error) {
	switch len(b) {
	case ackV1Size:
		if [4]byte(b[:4]) != ackMagic || b[4] != ackV1Version || binary.LittleEndian.Uint32(b[22:26]) != frameCRC(b[:22], nil) {
			return ackState{}, false, errAckDamaged
		}
		return ackState{
			ack:           binary.LittleEndian.Uint64(b[6:14]),
			fsyncInterval: binary.LittleEndian.Uint64(b[14:22]),
			clean:         b[5]&ackClean != 0,
		}, false, nil
	case ackFileSize:
		a, okA := decodeAckSlot(b[:ackSlotSize])
		c, okC := decodeAckSlot(b[ackSlotStride : ackSlotStride+ackSlotSize])
		switch {
		case okA && okC:
			if c.gen > a.gen {
				return c, false, nil
			}
			return a, false, nil
		// Open writes one slot and zeros the other: a damaged slot that
		// is not all zeros was torn.
		case okA:
			return a, !allZero(b[ackSlotStride : ackSlotStride+ackSlotSize]), nil
		case okC:
			return c, !allZero(b[:ackSlotSize]), nil
		}
	}
	return ackState{}, false, errAckDamaged
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// readAckFile reports found = false when there is no ack file.
func readAckFile(dir string) (st ackState, found, torn bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, ackFileName))
	if os.IsNotExist(err) {
		return ackState{}, false, false, nil
	}
	if err != nil {
		return ackState{}, false, false, fmt.Errorf("spool: %w", err)
	}
	st, torn, err = decodeAck(b)
	return st, true, torn, err
}

// persistAck writes the current ack point: in place into the open ack
// file, or as a new file the first time (Open).
func (s *Spool) persistAck(clean bool) error {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	s.mu.Lock()
	st := ackState{ack: s.ack, fsyncInterval: uint64(s.cfg.FsyncInterval), clean: clean, gen: s.ackGen + 1}
	s.mu.Unlock()

	if s.ackFile == nil {
		if err := s.createAckFile(st); err != nil {
			return err
		}
	} else {
		_, err := s.ackFile.WriteAt(encodeAckSlot(st), ackSlotOffset(st.gen))
		if err == nil {
			err = s.fsync(s.ackFile)
		}
		if err != nil {
			// The slot may be half written: write a whole new file next
			// time rather than trust this one's other slot to stay the
			// newest.
			s.ackFile.Close()
			s.ackFile = nil
			return fmt.Errorf("spool: write ack file: %w", err)
		}
	}
	s.ackGen = st.gen
	return nil
}

// createAckFile replaces the ack file with one holding st in its slot and
// opens it for the writes in place that follow.
func (s *Spool) createAckFile(st ackState) error {
	b := make([]byte, ackFileSize)
	copy(b[ackSlotOffset(st.gen):], encodeAckSlot(st))
	tmp := ackTmpPath(s.cfg.Dir)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return fmt.Errorf("spool: write ack file: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = s.fsync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	path := filepath.Join(s.cfg.Dir, ackFileName)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("spool: write ack file: %w", err)
	}
	if err := s.syncDir(); err != nil {
		return err
	}
	// Failing to reopen it is not an error: st is on disk, and the next
	// write makes a new file again.
	if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
		s.ackFile = f
	}
	return nil
}

// closeAckFile closes the ack file handle (Close, after the last write).
func (s *Spool) closeAckFile() error {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	if s.ackFile == nil {
		return nil
	}
	err := s.ackFile.Close()
	s.ackFile = nil
	return err
}
