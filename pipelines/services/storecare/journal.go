package storecare

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
)

// The journal keeps the repairs across restarts of the store: a part
// detached whose rows are not rebuilt yet is rebuilt by the next run.
// It lives beside the engine's data, in journalDir.
const (
	journalDir  = "spikehunt-care"
	journalFile = "repairs.json"
	// maxJournal bounds the repairs kept: the pending ones and the newest
	// done ones.
	maxJournal = 500
	// maxJournalBytes bounds what is read back.
	maxJournalBytes = 4 << 20
)

func (c *Carer) journalPath() string { return filepath.Join(c.cfg.Dir, journalDir, journalFile) }

// loadJournal reads the journal; a missing one is empty. A journal that
// cannot be read is set aside (renamed with .bad) and reported: the
// parts it named stay detached, and the engine's own detached/ folders
// still list them.
func (c *Carer) loadJournal() ([]*repair, error) {
	p := c.journalPath()
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("storecare: read the journal: %w", err)
	}
	defer f.Close()
	var rs []*repair
	// A journal past the bound is cut short, and does not decode.
	dec := json.NewDecoder(io.LimitReader(f, maxJournalBytes))
	if err := dec.Decode(&rs); err != nil {
		os.Rename(p, p+".bad")
		return nil, fmt.Errorf("storecare: the journal %s cannot be read (set aside as %s.bad): %w", p, filepath.Base(p), err)
	}
	var out []*repair
	for _, r := range rs {
		if r != nil && partName.MatchString(r.Table) && partName.MatchString(r.Part) && (r.Partition == "" || partName.MatchString(r.Partition)) {
			out = append(out, r)
		}
	}
	return out, nil
}

// saveJournal writes the journal whole, through a file renamed into place.
func (c *Carer) saveJournal() error {
	rs := c.repairs
	if n := len(rs) - maxJournal; n > 0 {
		var kept []*repair
		for _, r := range rs {
			if r.State == statePending || n <= 0 {
				kept = append(kept, r)
			} else {
				n--
			}
		}
		rs = kept
		c.repairs = kept
	}
	b, err := json.MarshalIndent(rs, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(c.journalPath())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("storecare: write the journal: %w", err)
	}
	tmp := c.journalPath() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("storecare: write the journal: %w", err)
	}
	if err := os.Rename(tmp, c.journalPath()); err != nil {
		return fmt.Errorf("storecare: write the journal: %w", err)
	}
	return nil
}

// brokenOnStart lists the parts the engine took out of their tables
// itself when it booted (system.detached_parts, reason "broken…"), that
// the journal does not hold: their rows are gone from the table as a
// part this package detached. Their time range is read from the part's
// min-max index file, as the engine wrote it.
func (c *Carer) brokenOnStart(ctx context.Context, known map[string]bool) ([]*repair, error) {
	var out []*repair
	err := c.st.Query(ctx, "SELECT table, name, ifNull(partition_id, '') AS partition_id, path, ifNull(reason, '') AS reason, toUnixTimestamp(modification_time) AS mod_t "+
		"FROM system.detached_parts WHERE database = "+quoteString(c.cfg.Database)+" AND startsWith(ifNull(reason, ''), 'broken')", func(b store.Block) error {
		for i := 0; i < b.Rows; i++ {
			r := &repair{Table: store.Text(b.Col("table"), i), Part: store.Text(b.Col("name"), i),
				Partition: store.Text(b.Col("partition_id"), i), Detached: unixCol(b.Col("mod_t"), i),
				Reason: "the engine took it out when it booted (" + store.Text(b.Col("reason"), i) + ")"}
			if known[r.key()] || !partName.MatchString(r.Part) {
				continue
			}
			dir := store.Text(b.Col("path"), i)
			r.From, r.To = minmaxTimes(dir)
			r.Rows = countFile(dir)
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("storecare: list the parts the engine detached: %w", err)
	}
	return out, nil
}

// minmaxTimes reads a part's min-max index of a DateTime column
// (minmax_<column>.idx: two UInt32, little-endian), or zero times.
func minmaxTimes(dir string) (time.Time, time.Time) {
	m, _ := filepath.Glob(filepath.Join(dir, "minmax_*.idx"))
	for _, f := range m {
		b, err := os.ReadFile(f)
		if err != nil || len(b) != 8 {
			continue
		}
		lo, hi := binary.LittleEndian.Uint32(b[:4]), binary.LittleEndian.Uint32(b[4:])
		if lo == 0 || hi < lo {
			continue
		}
		return time.Unix(int64(lo), 0).UTC(), time.Unix(int64(hi), 0).UTC()
	}
	return time.Time{}, time.Time{}
}

// countFile reads a part's row count (count.txt), or 0.
func countFile(dir string) uint64 {
	b, err := os.ReadFile(filepath.Join(dir, "count.txt"))
	if err != nil || len(b) > 32 {
		return 0
	}
	n, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n
}
