package chhttp

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// do sends one statement as user (empty: none) and returns the status and body.
func do(t *testing.T, addr, user, pass, query, body string, params url.Values) (int, string) {
	t.Helper()
	if params == nil {
		params = url.Values{}
	}
	if query != "" {
		params.Set("query", query)
	}
	req, err := http.NewRequest("POST", "http://"+addr+"/?"+params.Encode(), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var twoUsers = Config{User: "ingest", Password: "w", ReadOnlyUser: "grafana", ReadOnlyPassword: "r", MigrateUser: "migrate", MigratePassword: "m"}

// Nothing a client sends reads or writes a file, or reaches a host, as the
// server's own user: not the table functions, not their table engines, not
// a dictionary, not INTO OUTFILE / FROM INFILE, not a file-naming setting,
// and not a second statement hidden after the first. For both users.
func TestNoStatementReachesFilesOrHostsForEitherUser(t *testing.T) {
	h := New(testenv.ClickHouse(t), twoUsers)
	refused := h.refused
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	if st, body := do(t, addr, "migrate", "m", "CREATE TABLE kv (k String, v UInt32) ENGINE = MergeTree ORDER BY k", "", nil); st != 200 {
		t.Fatalf("create: %d %s", st, body)
	}
	var hits atomic.Int64
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "a,1\n")
	}))
	defer peer.Close()
	peerAddr := strings.TrimPrefix(peer.URL, "http://")
	dir := t.TempDir()
	out := func(name string) string { return filepath.Join(dir, name) }
	hostile := []struct{ name, query, body string }{
		{"file()", "SELECT * FROM file('/etc/passwd', 'LineAsString')", ""},
		{"file() in odd case behind a comment", "sElEcT * FrOm /* x */ FILE('/etc/passwd', 'LineAsString')", ""},
		{"the file() function", "SELECT file('/etc/passwd')", ""},
		{"the file() function quoted, in a lambda", "SELECT arrayMap(p -> `file`(p), ['/etc/passwd'])", ""},
		{"the file() function into a table", "INSERT INTO kv SELECT file('/etc/passwd'), 1", ""},
		{"catboostEvaluate()", "SELECT catboostEvaluate('/etc/passwd', 1)", ""},
		{"DESCRIBE of file()", "DESCRIBE TABLE file('/etc/passwd', 'LineAsString')", ""},
		{"file() behind view()", "SELECT * FROM view(SELECT * FROM file('/etc/passwd', 'LineAsString'))", ""},
		{"a web disk", "CREATE TABLE w (a UInt8) ENGINE = MergeTree ORDER BY a SETTINGS disk = disk(type = 'web', endpoint = '" + peer.URL + "/')", ""},
		{"a local disk elsewhere", "CREATE TABLE l (a UInt8) ENGINE = MergeTree ORDER BY a SETTINGS disk = disk(type = 'local', path = '" + out("disk") + "/')", ""},
		{"ATTACH FROM a path", "ATTACH TABLE at FROM '/etc/' (line String) ENGINE = Log", ""},
		{"file() in a subquery", "SELECT count() FROM (SELECT * FROM file('/etc/passwd', 'LineAsString')) WHERE line LIKE 'root%'", ""},
		{"insert into function file()", "INSERT INTO FUNCTION file('" + out("fn.csv") + "', 'CSV') SELECT 1", ""},
		{"File table engine", "CREATE TABLE f (line String) ENGINE = File(LineAsString, '/etc/passwd')", ""},
		{"url()", "SELECT * FROM url('" + peer.URL + "/', 'CSV')", ""},
		{"URL table engine", "CREATE TABLE u (a String, b UInt8) ENGINE = URL('" + peer.URL + "/', CSV)", ""},
		{"s3()", "SELECT * FROM s3('" + peer.URL + "/bucket/key.csv', 'CSV')", ""},
		{"s3Cluster()", "SELECT * FROM s3Cluster('default', '" + peer.URL + "/bucket/key.csv', 'CSV')", ""},
		{"urlCluster()", "SELECT * FROM urlCluster('default', '" + peer.URL + "/', 'CSV')", ""},
		{"remote()", "SELECT * FROM remote('" + peerAddr + "', system.one)", ""},
		{"mysql()", "SELECT * FROM mysql('" + peerAddr + "', 'd', 't', 'u', 'p')", ""},
		{"postgresql()", "SELECT * FROM postgresql('" + peerAddr + "', 'd', 't', 'u', 'p')", ""},
		{"hdfs()", "SELECT * FROM hdfs('hdfs://" + peerAddr + "/x', 'CSV', 'a String')", ""},
		{"executable()", "SELECT * FROM executable('sh', 'TabSeparated', 'a String')", ""},
		{"dictionary with a file source", "CREATE DICTIONARY d (line String) PRIMARY KEY line SOURCE(FILE(path '/etc/passwd' format 'LineAsString')) LAYOUT(FLAT()) LIFETIME(0)", ""},
		{"INTO OUTFILE", "SELECT 1 INTO OUTFILE '" + out("outfile.txt") + "'", ""},
		{"INTO OUTFILE behind comments and case", "select 1 into/**/outfile '" + out("outfile2.txt") + "' -- x", ""},
		{"FROM INFILE", "INSERT INTO kv FROM INFILE '/etc/passwd' FORMAT LineAsString", ""},
		{"a second statement", "SELECT 1; SELECT 1 INTO OUTFILE '" + out("second.txt") + "'", ""},
		{"a second statement behind a heredoc", "SELECT $$ ' $$; SELECT 1 INTO OUTFILE '" + out("heredoc.txt") + "' -- '", ""},
		{"a second statement after inline insert data", "INSERT INTO kv VALUES ('a', 1); SELECT 1 INTO OUTFILE '" + out("inline.txt") + "'", ""},
		{"a second statement in the body", "", "SELECT 2;\nINSERT INTO FUNCTION file('" + out("body.csv") + "', 'CSV') SELECT 1"},
		{"Template format reading a file via SETTINGS", "SELECT * FROM system.one FORMAT Template SETTINGS format_template_row = '/etc/passwd'", ""},
		{"format_schema via SET", "SET format_schema = '/etc/passwd:X'", ""},
		{"BACKUP to a file", "BACKUP TABLE kv TO File('" + out("backup") + "')", ""},
	}
	for _, user := range []struct{ name, pass string }{{"ingest", "w"}, {"grafana", "r"}, {"migrate", "m"}} {
		for _, tc := range hostile {
			t.Run(user.name+"/"+tc.name, func(t *testing.T) {
				status, body := do(t, addr, user.name, user.pass, tc.query, tc.body, nil)
				if status == http.StatusOK || strings.Contains(body, "root:") {
					t.Fatalf("answered %d %q, want refused", status, body)
				}
			})
		}
	}
	// A URL setting that names a file is refused the same way.
	status, body := do(t, addr, "ingest", "w", "SELECT * FROM system.one FORMAT Template", "", url.Values{"format_template_row": {"/etc/passwd"}})
	if status == http.StatusOK || strings.Contains(body, "root:") {
		t.Fatalf("format_template_row in the URL: %d %q", status, body)
	}
	for _, reason := range []string{"into_outfile", "from_infile", "function", "table_function", "table_engine", "statement", "setting", "unparsable", "insert_with_semicolon"} {
		if n := testutil.ToFloat64(refused.WithLabelValues(reason)); n == 0 {
			t.Errorf("spikehunt_chhttp_refused_total{reason=%q} = 0", reason)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the peer was reached %d times", n)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		t.Errorf("%s was written", e.Name())
	}
	// The store still answers what it should, words like file included.
	for q, want := range map[string]string{
		"SELECT count() FROM numbers(10)":                        "10\n",
		"SELECT number AS file FROM numbers(1)":                  "0\n",
		"SELECT 'profile' AS outfile_name, profile(1) = 1 AS ok": "", // profile() does not exist: refused by the engine, not the gate
		"SELECT 1; ": "1\n",
		"/* a comment */ SELECT 2 -- and another": "2\n",
	} {
		status, body := do(t, addr, "grafana", "r", q, "", nil)
		if want == "" {
			if status == http.StatusForbidden {
				t.Errorf("%s: the gate refused it: %q", q, body)
			}
			continue
		}
		if status != 200 || body != want {
			t.Errorf("%s: %d %q, want %q", q, status, body, want)
		}
	}
}

// The read-only user reads, and cannot write, change the schema, or turn
// readonly off by any route.
func TestReadOnlyUserCannotWriteNorTurnReadonlyOff(t *testing.T) {
	addr, _ := serve(t, twoUsers)
	for _, q := range []string{
		"CREATE TABLE kv (k String, v UInt32) ENGINE = MergeTree ORDER BY k",
		"INSERT INTO kv VALUES ('a', 1)",
	} {
		if st, body := do(t, addr, "migrate", "m", q, "", nil); st != 200 {
			t.Fatalf("%s: %d %s", q, st, body)
		}
	}
	for _, tc := range []struct {
		name, query, body string
		params            url.Values
	}{
		{"INSERT VALUES", "INSERT INTO kv VALUES ('b', 2)", "", nil},
		{"INSERT with the data in the body", "INSERT INTO kv FORMAT JSONEachRow", `{"k":"c","v":3}`, nil},
		{"INSERT SELECT", "INSERT INTO kv SELECT 'd', 4", "", nil},
		{"CREATE", "CREATE TABLE other (a UInt8) ENGINE = Memory", "", nil},
		{"DROP", "DROP TABLE kv", "", nil},
		{"TRUNCATE", "TRUNCATE TABLE kv", "", nil},
		{"ALTER DELETE", "ALTER TABLE kv DELETE WHERE 1", "", nil},
		{"SET readonly = 0", "SET readonly = 0", "", nil},
		{"SET readonly = DEFAULT", "SET readonly = DEFAULT", "", nil},
		{"readonly in the URL", "SELECT getSetting('readonly')", "", url.Values{"readonly": {"0"}}},
		{"readonly in a SETTINGS clause", "SELECT getSetting('readonly') SETTINGS readonly = 0", "", nil},
		{"a write behind a SELECT", "SELECT 1; DROP TABLE kv", "", nil},
		{"SYSTEM", "SYSTEM STOP MERGES kv", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if status, body := do(t, addr, "grafana", "r", tc.query, tc.body, tc.params); status == http.StatusOK {
				t.Fatalf("answered 200 %q, want refused", body)
			}
		})
	}
	// What Grafana does still works: a SELECT with its own timeout.
	status, body := do(t, addr, "grafana", "r", "SELECT k, v, getSetting('readonly') FROM kv FORMAT CSV", "", url.Values{"max_execution_time": {"30"}})
	if status != 200 || body != "\"a\",1,2\n" {
		t.Fatalf("the read-only user's SELECT: %d %q, want the one row with readonly 2", status, body)
	}
	if status, body := do(t, addr, "ingest", "w", "SELECT count() FROM kv", "", nil); status != 200 || body != "1\n" {
		t.Fatalf("after the attempts: %d %q, want the one row", status, body)
	}
	// Each user with the other's password is refused.
	if status, _ := do(t, addr, "grafana", "w", "SELECT 1", "", nil); status != http.StatusUnauthorized {
		t.Fatalf("grafana with ingest's password: %d", status)
	}
}

// The engine's connections are shared by every client, so a statement that
// would change its connection for the next one (someone else's) is
// refused: SET, USE, a temporary table, a transaction.
func TestNoStatementChangesTheSharedConnectionForTheNext(t *testing.T) {
	addr, db := serve(t, Config{})
	for _, q := range []string{
		"SET max_threads = 1",
		"SET readonly = 1",
		"set /* x */ ROLE NONE",
		"USE system",
		"CREATE TEMPORARY TABLE tmp (a UInt8)",
		"BEGIN TRANSACTION",
	} {
		if status, body := do(t, addr, "", "", q, "", nil); status != http.StatusBadRequest || !strings.Contains(body, "no sessions") {
			t.Errorf("%s: %d %q, want 400 and no sessions", q, status, body)
		}
	}
	// Every pooled connection is still in the store's database and writable.
	for range 8 {
		if status, body := do(t, addr, "", "", "SELECT currentDatabase(), getSetting('readonly')", "", nil); status != 200 || body != db+"\t0\n" {
			t.Fatalf("after the attempts: %d %q, want %q", status, body, db+"\t0\n")
		}
	}
}

// A statement is stopped at the server's MaxExecutionTime, whatever the
// client asks for.
func TestMaxExecutionTimeStopsAStatementWhateverTheClientAsks(t *testing.T) {
	addr, _ := serve(t, Config{MaxExecutionTime: time.Second})
	start := time.Now()
	status, body := do(t, addr, "", "", "SELECT count() FROM numbers(1000000000000) WHERE NOT ignore(sipHash64(number))", "", url.Values{"max_execution_time": {"3600"}})
	if status == http.StatusOK || !strings.Contains(body, "TIMEOUT_EXCEEDED") {
		t.Fatalf("got %d %q, want TIMEOUT_EXCEEDED", status, body)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("took %v", d)
	}
}
