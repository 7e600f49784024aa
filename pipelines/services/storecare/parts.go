package storecare

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/spikehunt/spikehunt/internal/store"
)

// corruptCodes are the engine's error codes that say a part's files are
// not what its checksums and marks promise: only a read failing with one
// of these takes a part out of its table. A read that fails for any other
// reason (memory, a timeout, a killed statement) leaves it.
var corruptCodes = map[int]string{
	32:  "ATTEMPT_TO_READ_AFTER_EOF",
	33:  "CANNOT_READ_ALL_DATA",
	39:  "TOO_LARGE_SIZE_COMPRESSED",
	40:  "CHECKSUM_DOESNT_MATCH",
	91:  "SIZES_OF_MARKS_FILES_ARE_INCONSISTENT",
	107: "FILE_DOESNT_EXIST",
	117: "INCORRECT_DATA",
	226: "NO_FILE_IN_DATA_PART",
	227: "UNEXPECTED_FILE_IN_DATA_PART",
	228: "BAD_SIZE_OF_FILE_IN_DATA_PART",
	246: "CORRUPTED_DATA",
	271: "CANNOT_DECOMPRESS",
	432: "UNKNOWN_CODEC",
	513: "UNKNOWN_PART_TYPE",
	740: "POTENTIALLY_BROKEN_DATA_PART",
}

// notEnoughSpace is NOT_ENOUGH_SPACE; a write failing with ENOSPC says
// "No space left on device" under other codes.
const notEnoughSpace = 243

const noSpaceText = "No space left on device"

// part is one active part of a table of the store's database.
type part struct {
	Table     string
	Name      string
	Partition string
	Path      string // absolute, with a trailing slash
	MinTime   time.Time
	MaxTime   time.Time
	Rows      uint64
	Modified  time.Time
}

// key names the part in logs and sets.
func (p part) key() string { return p.Table + "/" + p.Name }

// partName is what a part's name may hold; it is put in statements.
var partName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,200}$`)

// activeParts lists the active parts of the store's database written at
// or after since (every part when since is zero), oldest first.
func (c *Carer) activeParts(ctx context.Context, since time.Time) ([]part, error) {
	q := "SELECT table, name, partition_id, path, toUnixTimestamp(min_time) AS min_t, toUnixTimestamp(max_time) AS max_t, rows, " +
		"toUnixTimestamp(modification_time) AS mod_t FROM system.parts WHERE database = " + quoteString(c.cfg.Database) + " AND active"
	if !since.IsZero() {
		q += fmt.Sprintf(" AND modification_time >= toDateTime(%d)", since.Unix())
	}
	q += " ORDER BY modification_time, table, name"
	var out []part
	err := c.st.Query(ctx, q, func(b store.Block) error {
		for i := 0; i < b.Rows; i++ {
			p := part{
				Table: store.Text(b.Col("table"), i), Name: store.Text(b.Col("name"), i),
				Partition: store.Text(b.Col("partition_id"), i), Path: store.Text(b.Col("path"), i),
			}
			p.MinTime = unixCol(b.Col("min_t"), i)
			p.MaxTime = unixCol(b.Col("max_t"), i)
			p.Modified = unixCol(b.Col("mod_t"), i)
			p.Rows, _ = strconv.ParseUint(store.Text(b.Col("rows"), i), 10, 64)
			if partName.MatchString(p.Name) {
				out = append(out, p)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("storecare: list the parts: %w", err)
	}
	return out, nil
}

// partList is the database's active parts, listed on first use.
type partList struct {
	c     *Carer
	parts []part
	done  bool
}

func (l *partList) get(ctx context.Context) ([]part, error) {
	if l.done {
		return l.parts, nil
	}
	parts, err := l.c.activeParts(ctx, time.Time{})
	if err != nil {
		return nil, err
	}
	l.parts, l.done = parts, true
	return parts, nil
}

func unixCol(c proto.ColResult, i int) time.Time {
	n, err := strconv.ParseInt(store.Text(c, i), 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.Unix(n, 0).UTC()
}

// engineError is one row of system.errors.
type engineError struct {
	Code    int
	Value   uint64
	Last    time.Time
	Message string
}

// engineErrors reads the engine's counts of the errors that matter here:
// the corruption codes and running out of space.
func (c *Carer) engineErrors(ctx context.Context) ([]engineError, error) {
	codes := make([]string, 0, len(corruptCodes)+1)
	for code := range corruptCodes {
		codes = append(codes, strconv.Itoa(code))
	}
	codes = append(codes, strconv.Itoa(notEnoughSpace))
	q := "SELECT code, value, toUnixTimestamp(last_error_time) AS last_t, last_error_message FROM system.errors WHERE value > 0 AND (code IN (" +
		strings.Join(codes, ", ") + ") OR position(last_error_message, " + quoteString(noSpaceText) + ") > 0)"
	var out []engineError
	err := c.st.Query(ctx, q, func(b store.Block) error {
		for i := 0; i < b.Rows; i++ {
			code, _ := strconv.Atoi(store.Text(b.Col("code"), i))
			v, _ := strconv.ParseUint(store.Text(b.Col("value"), i), 10, 64)
			out = append(out, engineError{Code: code, Value: v, Last: unixCol(b.Col("last_t"), i), Message: store.Text(b.Col("last_error_message"), i)})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("storecare: read the engine's errors: %w", err)
	}
	return out, nil
}

// noSpace says whether e is a write that found the volume full.
func (e engineError) noSpace() bool {
	return e.Code == notEnoughSpace || strings.Contains(e.Message, noSpaceText)
}

// named returns the parts whose folder msg names. Messages name a part
// by its absolute path or by the path under the data directory, so the
// match is on the part's table folder and name ("<uuid>/<name>/").
func named(parts []part, msg string) []part {
	var out []part
	for _, p := range parts {
		dir := strings.TrimSuffix(p.Path, "/")
		tail := path.Base(path.Dir(dir)) + "/" + p.Name + "/"
		if strings.Contains(msg, tail) {
			out = append(out, p)
		}
	}
	return out
}

// errCode is the engine's code in an error's text ("Code: 246."), or 0.
var codeRE = regexp.MustCompile(`Code: (\d+)\.`)

func errCode(err error) int {
	m := codeRE.FindStringSubmatch(err.Error())
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// verifyTimeout bounds the read of one part.
const verifyTimeout = 5 * time.Minute

// verify reads every column of every row of p. It says the part is
// broken when the read fails with a corruption code and names the part;
// any other failure is returned as an error, and the part is left alone.
func (c *Carer) verify(ctx context.Context, p part) (broken bool, reason string, err error) {
	q := fmt.Sprintf("SELECT count() AS n FROM %s.%s WHERE _part = %s AND NOT ignore(*)",
		quoteIdent(c.cfg.Database), quoteIdent(p.Table), quoteString(p.Name))
	vctx, cancel := context.WithTimeout(ctx, verifyTimeout)
	defer cancel()
	err = c.st.Query(vctx, q, func(store.Block) error { return nil }, store.WithSetting("max_threads", "1"))
	if err == nil {
		return false, "", nil
	}
	if _, ok := corruptCodes[errCode(err)]; ok && len(named([]part{p}, err.Error())) == 1 {
		return true, firstLine(err.Error()), nil
	}
	return false, "", fmt.Errorf("storecare: read part %s: %w", p.key(), err)
}

// firstLine cuts an engine message to its first line and 300 bytes, for
// a log line or a journal entry.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

func quoteIdent(s string) string {
	return "`" + strings.NewReplacer("\\", "\\\\", "`", "\\`").Replace(s) + "`"
}

func quoteString(s string) string {
	return "'" + strings.NewReplacer("\\", "\\\\", "'", "\\'").Replace(s) + "'"
}
