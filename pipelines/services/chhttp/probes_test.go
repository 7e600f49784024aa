package chhttp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

var threeUsers = Config{User: "ingest", Password: "w", ReadOnlyUser: "grafana", ReadOnlyPassword: "r", MigrateUser: "migrate", MigratePassword: "m", MaxExecutionTime: 5 * time.Second}

// The attacker's probes that went around the old gate, each as it was
// sent, for each role that could send it. Each must be refused, read no
// file, write nothing outside the store and reach no host.
func TestTheProbesThatWentAroundTheGateAreRefused(t *testing.T) {
	st := testenv.ClickHouse(t)
	addr := serveStore(t, st, threeUsers)
	mustDo := func(user, pass, q string) {
		t.Helper()
		if status, body := do(t, addr, user, pass, q, "", nil); status != 200 {
			t.Fatalf("%s: %d %s", q, status, body)
		}
	}
	mustDo("migrate", "m", "CREATE TABLE leak (s String) ENGINE = MergeTree ORDER BY s")
	var hits atomic.Int64
	registry := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "SECRET-FROM-AN-INTERNAL-URL")
	}))
	defer registry.Close()
	victim := t.TempDir()
	secret := filepath.Join(victim, "secret")
	if err := os.WriteFile(secret, []byte("root:SECRET-FILE\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rel := strings.TrimPrefix(victim, "/") // engine-relative paths
	avro := "SELECT * FROM format(AvroConfluent,'a String',unhex('0000000001020361'))"
	type probe struct {
		name, user, query, body string
		params                  url.Values
	}
	var probes []probe
	for _, u := range []string{"ingest", "grafana", "migrate", "nobody"} {
		probes = append(probes,
			probe{"1 Values body evaluates file()", u, "INSERT INTO leak FORMAT Values", "(file('" + secret + "'))", nil},
			probe{"1 inline VALUES evaluates file()", u, "INSERT INTO leak VALUES (file('" + secret + "'))", "", nil},
			probe{"1 Values expressions turned back on in SETTINGS", u, "INSERT INTO leak SETTINGS input_format_values_interpret_expressions = 1 FORMAT Values", "(file('" + secret + "'))", nil},
			probe{"1 Values expressions turned back on in the URL", u, "INSERT INTO leak FORMAT Values", "(file('" + secret + "'))", url.Values{"input_format_values_interpret_expressions": {"1"}}},
			probe{"2 EmbeddedRocksDB at an absolute path", u, "CREATE TABLE rdb (k UInt8, v String) ENGINE = EmbeddedRocksDB(0, '" + filepath.Join(victim, "rocks") + "') PRIMARY KEY k", "", nil},
			probe{"2 ATTACH FROM a folder", u, "ATTACH TABLE att FROM '" + rel + "/' (s String) ENGINE = TinyLog", "", nil},
			probe{"2 FileLog reads a file", u, "CREATE TABLE fl (line String) ENGINE = FileLog('" + rel + "/secret', 'LineAsString')", "", nil},
			probe{"2 FileLog direct select", u, "SELECT * FROM system.one SETTINGS stream_like_engine_allow_direct_select = 1", "", nil},
			probe{"3 AvroConfluent schema registry in SETTINGS", u, avro + " SETTINGS format_avro_schema_registry_url = '" + registry.URL + "/'", "", nil},
			probe{"3 AvroConfluent schema registry in the URL", u, avro, "", url.Values{"format_avro_schema_registry_url": {registry.URL + "/"}}},
			probe{"4 the execution cap lifted in SETTINGS", u, "SELECT sleepEachRow(1) FROM numbers(7) SETTINGS max_block_size = 1, max_execution_time = 0", "", nil},
			probe{"8 someone else's query text", u, "SELECT query FROM system.processes", "", nil},
			probe{"8 someone else's query text through IN", u, "SELECT 1 WHERE 'x' IN system.processes", "", nil},
			probe{"8 SHOW PROCESSLIST", u, "SHOW PROCESSLIST", "", nil},
		)
	}
	// In the URL a larger value, or none, is the cap (Grafana's timeout
	// may exceed it): the statement runs, and stops there.
	probes = append(probes, probe{"4 the execution cap lifted in the URL", "grafana", "SELECT sleepEachRow(1) FROM numbers(7) SETTINGS max_block_size = 1", "", url.Values{"max_execution_time": {"0"}}})
	pass := map[string]string{"ingest": "w", "grafana": "r", "migrate": "m", "nobody": "x"}
	for _, p := range probes {
		t.Run(p.user+"/"+p.name, func(t *testing.T) {
			status, body := do(t, addr, p.user, pass[p.user], p.query, p.body, p.params)
			if strings.HasPrefix(p.name, "4 ") && strings.Contains(body, "TIMEOUT_EXCEEDED") {
				return // stopped at the cap
			}
			if status == http.StatusOK || strings.Contains(body, "SECRET") {
				t.Fatalf("answered %d %q, want refused", status, body)
			}
		})
	}
	if status, body := do(t, addr, "ingest", "w", "SELECT count() FROM leak WHERE s LIKE '%SECRET%'", "", nil); status != 200 || body != "0\n" {
		t.Errorf("rows holding the file: %d %q, want 0", status, body)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the schema registry was reached %d times", n)
	}
	entries, _ := os.ReadDir(victim)
	if len(entries) != 1 {
		t.Errorf("the victim folder holds %d entries, want the secret alone", len(entries))
	}
	// What the roles do still works.
	if status, body := do(t, addr, "ingest", "w", "INSERT INTO leak FORMAT Values", "('a'), ('b')", nil); status != 200 {
		t.Fatalf("a Values insert of literals: %d %s", status, body)
	}
	if status, body := do(t, addr, "grafana", "r", "SELECT count() FROM leak SETTINGS max_execution_time = 3", "", nil); status != 200 || body != "2\n" {
		t.Fatalf("a read: %d %q", status, body)
	}
}

// A statement whose client has left is killed, not left to hold its
// connection: four abandoned sleeps on the read-only pool leave the pool
// free at once, and the ingest's pool was never touched.
func TestAStatementWhoseClientLeftIsKilled(t *testing.T) {
	ro := testenv.ClickHouse(t)
	pool := func(n int) *store.Embedded {
		st, err := store.OpenEmbedded(context.Background(), store.EmbeddedConfig{Dir: testenv.ClickHouseDir(), Database: ro.Database(), Connections: n})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	h := NewPools(Pools{ReadOnly: ro, Ingest: pool(2), Migrate: pool(1), Control: pool(1)}, threeUsers)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/?"+url.Values{"query": {"SELECT sum(sleepEachRow(1)) FROM numbers(25) SETTINGS max_block_size = 1"}}.Encode(), nil)
			req.SetBasicAuth("grafana", "r")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	status, body := do(t, addr, "grafana", "r", "SELECT 1", "", nil)
	if status != 200 {
		t.Fatalf("SELECT 1: %d %s", status, body)
	}
	// The engine checks a kill between blocks: each block sleeps a second.
	if d := time.Since(start); d > 2500*time.Millisecond {
		t.Fatalf("SELECT 1 after four abandoned statements took %v, want them killed", d)
	}
	fmt.Fprintln(io.Discard, body)
}
