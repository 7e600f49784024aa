package storecare

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
)

// The states of a repair.
const (
	statePending = "pending" // detached; its rows wait to be rebuilt
	stateRebuilt = "rebuilt" // its rows were rebuilt from the view's source
	stateLost    = "lost"    // no view feeds its table: its rows are gone
)

// repair is one part taken out of its table, and what became of its rows.
type repair struct {
	Table     string    `json:"table"`
	Part      string    `json:"part"`
	Partition string    `json:"partition"`
	From      time.Time `json:"from"` // the part's first and last time (its partition key's column)
	To        time.Time `json:"to"`
	Rows      uint64    `json:"rows"`
	Reason    string    `json:"reason"`
	Detached  time.Time `json:"detached"`
	State     string    `json:"state"`
	Source    string    `json:"source,omitempty"` // the table the feeding view reads
	Due       time.Time `json:"due,omitempty"`    // when a pending rebuild runs next
	Tries     int       `json:"tries,omitempty"`
	LastError string    `json:"last_error,omitempty"`
}

func (r *repair) key() string { return r.Table + "/" + r.Part }

// detach takes p out of its table. The engine moves its folder into the
// table's detached/ folder, where it stays for a person to look at.
func (c *Carer) detach(ctx context.Context, p part) error {
	q := fmt.Sprintf("ALTER TABLE %s.%s DETACH PART %s", quoteIdent(c.cfg.Database), quoteIdent(p.Table), quoteString(p.Name))
	if err := c.st.Exec(ctx, q); err != nil {
		return fmt.Errorf("storecare: detach part %s: %w", p.key(), err)
	}
	return nil
}

// feeder is the materialized view that fills a table, as the engine
// holds it.
type feeder struct {
	View    string
	Source  string // database.table the view reads
	Select  string // the view's SELECT
	TimeCol string // the table's time column: the DateTime in its partition key
}

// toClause finds a view's target in its CREATE statement, fromClause the
// table its SELECT reads.
var (
	toClause   = regexp.MustCompile(`(?s)^CREATE MATERIALIZED VIEW \S+ TO (\S+)`)
	fromClause = regexp.MustCompile(`\bFROM (\S+)`)
)

// feederOf finds the view that fills table, or nil when none does.
func (c *Carer) feederOf(ctx context.Context, table string) (*feeder, error) {
	db := c.cfg.Database
	target := db + "." + table
	var found []feeder
	err := c.st.Query(ctx, "SELECT name, as_select, create_table_query, arrayStringConcat(dependencies_database, ',') AS d FROM system.tables WHERE database = "+
		quoteString(db)+" AND engine = 'MaterializedView'", func(b store.Block) error {
		for i := 0; i < b.Rows; i++ {
			m := toClause.FindStringSubmatch(store.Text(b.Col("create_table_query"), i))
			if m == nil || strings.ReplaceAll(m[1], "`", "") != target {
				continue
			}
			found = append(found, feeder{View: store.Text(b.Col("name"), i), Select: store.Text(b.Col("as_select"), i)})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("storecare: find the view that fills %s: %w", table, err)
	}
	if len(found) == 0 {
		return nil, nil
	}
	if len(found) > 1 {
		// Rebuilding from one of several feeds would drop the others' rows.
		return nil, nil
	}
	f := found[0]
	if m := fromClause.FindStringSubmatch(f.Select); m != nil {
		f.Source = strings.ReplaceAll(m[1], "`", "")
	}
	err = c.st.Query(ctx, "SELECT name FROM system.columns WHERE database = "+quoteString(db)+" AND table = "+quoteString(table)+
		" AND is_in_partition_key AND type LIKE 'DateTime%' ORDER BY position LIMIT 1", func(b store.Block) error {
		if b.Rows > 0 {
			f.TimeCol = store.Text(b.Columns[0], 0)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("storecare: find %s's time column: %w", table, err)
	}
	if f.TimeCol == "" || f.Source == "" {
		return nil, nil
	}
	return &f, nil
}

// rebuildTable is the scratch table a rebuild fills before its rows are
// attached to the real one.
func rebuildTable(table string) string { return "spikehunt_care_" + table }

// rebuild puts back the rows of r's range: the view's SELECT over the
// range, into a scratch table of the same structure, then the range's
// rows of the table deleted and the scratch table's attached in their
// place. Attaching fires no view, so the tables fed from this one do not
// count the rows twice.
//
// Rows that reach the table for the range while it is rebuilt (between
// the delete's start and the scratch table's read) are counted twice; a
// repair waits until the range is --care.settle old so that only rows
// that late can be.
func (c *Carer) rebuild(ctx context.Context, r *repair, f *feeder) (rows uint64, err error) {
	db := quoteIdent(c.cfg.Database)
	table := db + "." + quoteIdent(r.Table)
	scratch := db + "." + quoteIdent(rebuildTable(r.Table))
	if !partName.MatchString(r.Partition) {
		return 0, fmt.Errorf("storecare: partition id %q", r.Partition)
	}
	cols, err := c.viewColumns(ctx, r.Table, f)
	if err != nil {
		return 0, err
	}
	rng := fmt.Sprintf("%s >= toDateTime(%d) AND %s <= toDateTime(%d)", quoteIdent(f.TimeCol), r.From.Unix(), quoteIdent(f.TimeCol), r.To.Unix())
	steps := []struct{ what, q string }{
		{"drop a scratch table left over", "DROP TABLE IF EXISTS " + scratch},
		{"create the scratch table", "CREATE TABLE " + scratch + " AS " + table},
		{"fill it from " + f.Source, "INSERT INTO " + scratch + " (" + cols + ") SELECT " + cols + " FROM (" + f.Select + ") WHERE " + rng},
	}
	for _, s := range steps {
		if err := c.st.Exec(ctx, s.q); err != nil {
			return 0, fmt.Errorf("storecare: rebuild %s: %s: %w", r.key(), s.what, err)
		}
	}
	defer func() {
		if derr := c.st.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+scratch); derr != nil && err == nil {
			err = fmt.Errorf("storecare: rebuild %s: drop the scratch table: %w", r.key(), derr)
		}
	}()
	err = c.st.Query(ctx, "SELECT count() FROM "+scratch, func(b store.Block) error {
		if b.Rows > 0 {
			fmt.Sscan(store.Text(b.Columns[0], 0), &rows)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("storecare: rebuild %s: count the rebuilt rows: %w", r.key(), err)
	}
	if err := c.deleteRange(ctx, r, table, rng); err != nil {
		return 0, fmt.Errorf("storecare: rebuild %s: delete the range's rows: %w", r.key(), err)
	}
	att := fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION ID %s FROM %s", table, quoteString(r.Partition), scratch)
	if err := c.st.Exec(ctx, att); err != nil {
		return 0, fmt.Errorf("storecare: rebuild %s: attach the rebuilt rows (the range is empty until a retry succeeds): %w", r.key(), err)
	}
	return rows, nil
}

// viewColumns lists the columns the view's SELECT gives that the table
// has, quoted and joined, in the table's order.
func (c *Carer) viewColumns(ctx context.Context, table string, f *feeder) (string, error) {
	var out, tcols []string
	err := c.st.Query(ctx, "SELECT name FROM system.columns WHERE database = "+quoteString(c.cfg.Database)+" AND table = "+quoteString(table)+
		" AND default_kind NOT IN ('MATERIALIZED', 'ALIAS') ORDER BY position", func(b store.Block) error {
		for i := 0; i < b.Rows; i++ {
			tcols = append(tcols, store.Text(b.Columns[0], i))
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("storecare: read %s's columns: %w", table, err)
	}
	var vcols []string
	err = c.st.Query(ctx, "DESCRIBE TABLE ("+f.Select+")", func(b store.Block) error {
		for i := 0; i < b.Rows; i++ {
			vcols = append(vcols, store.Text(b.Col("name"), i))
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("storecare: read the columns of view %s: %w", f.View, err)
	}
	for _, n := range tcols {
		if slices.Contains(vcols, n) {
			out = append(out, quoteIdent(n))
		}
	}
	if len(out) == 0 {
		return "", fmt.Errorf("storecare: view %s gives none of %s's columns", f.View, table)
	}
	return strings.Join(out, ", "), nil
}

// mutationWait bounds how long a rebuild waits for its delete.
const mutationWait = 10 * time.Minute

// deleteRange deletes the range's rows of r's partition: a mutation,
// waited for by reading system.mutations rather than with mutations_sync,
// which waits as long as the mutation is retried. A mutation that fails
// (another broken part in the partition) or outlasts mutationWait is
// taken back: left queued, it would be tried again for ever and hold up
// the merges of the parts it has not done.
func (c *Carer) deleteRange(ctx context.Context, r *repair, table, rng string) error {
	del := fmt.Sprintf("ALTER TABLE %s DELETE IN PARTITION ID %s WHERE %s", table, quoteString(r.Partition), rng)
	if err := c.st.Exec(ctx, del); err != nil {
		return err
	}
	where := fmt.Sprintf("database = %s AND table = %s AND NOT is_done", quoteString(c.cfg.Database), quoteString(r.Table))
	kill := func(cause error) error {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := c.st.Exec(kctx, "KILL MUTATION WHERE "+where); err != nil {
			return errors.Join(cause, fmt.Errorf("and take the mutation back: %w", err))
		}
		return cause
	}
	for deadline := time.Now().Add(mutationWait); ; {
		var open int
		var failed string
		err := c.st.Query(ctx, "SELECT count() AS n, any(latest_fail_reason) AS why FROM system.mutations WHERE "+where, func(b store.Block) error {
			if b.Rows > 0 {
				fmt.Sscan(store.Text(b.Col("n"), 0), &open)
				failed = store.Text(b.Col("why"), 0)
			}
			return nil
		})
		switch {
		case err != nil:
			return kill(err)
		case open == 0:
			return nil
		case failed != "":
			return kill(fmt.Errorf("the mutation failed: %s", firstLine(failed)))
		case time.Now().After(deadline):
			return kill(fmt.Errorf("the mutation did not finish within %v", mutationWait))
		}
		select {
		case <-ctx.Done():
			return kill(ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
