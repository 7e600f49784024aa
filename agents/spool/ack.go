package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The ack file holds the ack point and how the last run ended:
//
//	[0:4]   "SPAK"
//	[4]     version, 1
//	[5]     flags: bit 0 = closed cleanly
//	[6:14]  last acknowledged sequence number, u64
//	[14:22] the writer's FsyncInterval in nanoseconds, u64
//	[22:26] CRC-32C of [0:22]
//
// integers little-endian. It is replaced whole: written to ack.tmp,
// fsynced, renamed over ack, then the directory is fsynced.
const (
	ackFileName = "ack"
	ackFileSize = 26
	ackVersion  = 1
	ackClean    = 1 << 0
)

var (
	ackMagic      = [4]byte{'S', 'P', 'A', 'K'}
	errAckDamaged = errors.New("spool: ack file damaged")
)

type ackState struct {
	ack           uint64
	fsyncInterval uint64 // nanoseconds
	clean         bool
}

func ackTmpPath(dir string) string { return filepath.Join(dir, ackFileName+".tmp") }

func encodeAck(st ackState) []byte {
	b := make([]byte, ackFileSize)
	copy(b, ackMagic[:])
	b[4] = ackVersion
	if st.clean {
		b[5] = ackClean
	}
	binary.LittleEndian.PutUint64(b[6:14], st.ack)
	binary.LittleEndian.PutUint64(b[14:22], st.fsyncInterval)
	binary.LittleEndian.PutUint32(b[22:26], frameCRC(b[:22], nil))
	return b
}

func decodeAck(b []byte) (ackState, error) {
	if len(b) != ackFileSize || [4]byte(b[:4]) != ackMagic || b[4] != ackVersion ||
		binary.LittleEndian.Uint32(b[22:26]) != frameCRC(b[:22], nil) {
		return ackState{}, errAckDamaged
	}
	return ackState{
		ack:           binary.LittleEndian.Uint64(b[6:14]),
		fsyncInterval: binary.LittleEndian.Uint64(b[14:22]),
		clean:         b[5]&ackClean != 0,
	}, nil
}

// readAckFile reports found = false when there is no ack file.
func readAckFile(dir string) (st ackState, found bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, ackFileName))
	if os.IsNotExist(err) {
		return ackState{}, false, nil
	}
	if err != nil {
		return ackState{}, false, fmt.Errorf("spool: %w", err)
	}
	st, err = decodeAck(b)
	return st, true, err
}

// persistAck replaces the ack file with the current ack point.
func (s *Spool) persistAck(clean bool) error {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	s.mu.Lock()
	st := ackState{ack: s.ack, fsyncInterval: uint64(s.cfg.FsyncInterval), clean: clean}
	s.mu.Unlock()

	tmp := ackTmpPath(s.cfg.Dir)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return fmt.Errorf("spool: write ack file: %w", err)
	}
	_, err = f.Write(encodeAck(st))
	if err == nil {
		err = s.fsync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(s.cfg.Dir, ackFileName))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("spool: write ack file: %w", err)
	}
	return s.syncDir()
}
