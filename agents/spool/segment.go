package spool

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

const segmentSuffix = ".seg"

// segmentName is the file name of the segment whose first record is base:
// twenty digits, so that names sort like numbers.
func segmentName(base uint64) string { return fmt.Sprintf("%020d%s", base, segmentSuffix) }

func parseSegmentName(name string) (uint64, bool) {
	digits, ok := strings.CutSuffix(name, segmentSuffix)
	if !ok || len(digits) != 20 {
		return 0, false
	}
	base, err := strconv.ParseUint(digits, 10, 64)
	return base, err == nil
}

// listSegments returns the bases of the segment files in dir, ascending.
func listSegments(dir string) ([]uint64, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("spool: list %s: %w", dir, err)
	}
	var bases []uint64
	for _, de := range des {
		if base, ok := parseSegmentName(de.Name()); ok && de.Type().IsRegular() {
			bases = append(bases, base)
		}
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	return bases, nil
}

// entry locates one intact record in its segment file.
type entry struct {
	seq uint64
	off uint32 // of the frame's header
	n   uint32 // payload length
}

func (e entry) size() int64 { return headerSize + int64(e.n) }

// segment is one segment file. The Spool's mutex guards every field; r is
// also used without it by a reader holding a reference (readers > 0).
type segment struct {
	base uint64
	path string
	size int64   // bytes of the file that hold frames (the file's size once recovered)
	recs []entry // intact records, seq ascending; entries are never changed once appended
	live int64   // sum of recs' sizes

	r       *os.File // read handle, opened by the first Read
	readers int      // Reads in flight on r
	removed bool     // out of the spool; the last reader deletes the file
}

func newSegment(dir string, base uint64) *segment {
	return &segment{base: base, path: filepath.Join(dir, segmentName(base))}
}

func (g *segment) add(e entry) {
	g.recs = append(g.recs, e)
	g.live += e.size()
}

// search returns the index of the first record with seq >= seq.
func (g *segment) search(seq uint64) int {
	return sort.Search(len(g.recs), func(i int) bool { return g.recs[i].seq >= seq })
}

// acked reports whether every record in g is at or below ack.
func (g *segment) acked(ack uint64) bool {
	return len(g.recs) == 0 || g.recs[len(g.recs)-1].seq <= ack
}

// after counts the records above ack and their bytes.
func (g *segment) after(ack uint64) (n int, bytes int64) {
	i := g.search(ack + 1)
	if i == 0 {
		return len(g.recs), g.live
	}
	for _, e := range g.recs[i:] {
		bytes += e.size()
	}
	return len(g.recs) - i, bytes
}

// remove deletes the file, closing the read handle first (Windows cannot
// delete an open file).
func (g *segment) remove() error {
	if g.r != nil {
		g.r.Close()
		g.r = nil
	}
	if err := os.Remove(g.path); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("spool: remove segment: %w", err)
	}
	return nil
}
