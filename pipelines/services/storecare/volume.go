package storecare

import (
	"fmt"
	"syscall"
	"time"
)

// Volume is what statfs says of the file system holding the store's data.
type Volume struct {
	Free uint64 // bytes an unprivileged writer may still take (f_bavail)
	Size uint64 // bytes in all
}

// readVolume reads the file system that holds dir.
func readVolume(dir string) (Volume, error) {
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		return Volume{}, fmt.Errorf("storecare: statfs %s: %w", dir, err)
	}
	bs := uint64(s.Bsize)
	return Volume{Free: s.Bavail * bs, Size: s.Blocks * bs}, nil
}

// lowFree is the free space below which a volume counts as low: 1 % of
// it, and at least minLowFree. Below it the engine's next merge or
// insert may not find the room it needs.
func lowFree(size uint64) uint64 {
	return max(size/100, minLowFree)
}

// minLowFree is lowFree's floor.
const minLowFree = 64 << 20

// lowSpell keeps when the volume last ran low, so that the parts written
// from then on are read once the space is back.
type lowSpell struct {
	since time.Time // the start of the spell not yet swept; zero when none
	low   bool      // the volume is low now
}

// saw records one reading of the volume at t.
func (l *lowSpell) saw(low bool, t time.Time) {
	if low {
		l.mark(t)
	}
	l.low = low
}

// mark records that the volume was full at t (an engine's "no space"
// error), whatever the readings said: a spell shorter than a round.
func (l *lowSpell) mark(t time.Time) {
	if l.since.IsZero() || t.Before(l.since) {
		l.since = t
	}
}

// due says whether the parts written since the spell began should be
// read now: the spell is over.
func (l *lowSpell) due() (time.Time, bool) {
	return l.since, !l.since.IsZero() && !l.low
}

// swept clears the spell once its parts were read.
func (l *lowSpell) swept() { l.since = time.Time{} }
