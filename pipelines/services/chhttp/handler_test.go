package chhttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopShared()
	os.Exit(code)
}

// serve starts the handler over a database of the test's own and returns
// its address.
func serve(t *testing.T, cfg Config) (addr, db string) {
	t.Helper()
	st := testenv.ClickHouse(t)
	return serveStore(t, st, cfg), st.Database()
}

// serveStore serves st and returns the address.
func serveStore(t *testing.T, st Engine, cfg Config) string {
	t.Helper()
	srv := httptest.NewServer(New(st, cfg))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	served.Store(addr, st)
	t.Cleanup(func() { served.Delete(addr) })
	return addr
}

// served maps a test server's address to its store.
var served sync.Map

// ddl changes the schema of the store served at addr directly, as
// spikehunt migrate does: no role but the migrate user's may over HTTP.
func ddl(t *testing.T, addr, q string) {
	t.Helper()
	st, ok := served.Load(addr)
	if !ok {
		t.Fatalf("no store served at %s", addr)
	}
	if err := st.(Engine).QueryRaw(context.Background(), store.RawStatement{Query: q}, "TSV", io.Discard); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func openCH(t *testing.T, addr, db, user, pass string) clickhouse.Conn {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{
		Protocol: clickhouse.HTTP,
		Addr:     []string{addr},
		Auth:     clickhouse.Auth{Database: db, Username: user, Password: pass},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

type row struct {
	TS       time.Time
	TS3      time.Time
	Service  string
	Endpoint string
	Latency  uint32
	Count    uint64
	Status   uint16
	CPU      int16
	Value    float64
	TraceID  string
	Tags     []string
	Attrs    map[string]string
	Skew     map[string]float64
}

// Every column type the schema uses survives a clickhouse-go batch insert
// and select through serve-clickhouse.
func TestClickHouseGoRoundTripsEverySchemaType(t *testing.T) {
	addr, db := serve(t, Config{User: "grafana", Password: "s3cret", MigrateUser: "migrate", MigratePassword: "m"})
	conn := openCH(t, addr, db, "grafana", "s3cret")
	ctx := context.Background()
	err := openCH(t, addr, db, "migrate", "m").Exec(ctx, `CREATE TABLE rt (
		ts DateTime64(6, 'UTC'), ts3 DateTime64(3, 'UTC'), service LowCardinality(String), endpoint String,
		latency UInt32, count UInt64, status UInt16, cpu Int16, value Float64, trace_id FixedString(16),
		tags Array(LowCardinality(String)), attrs Map(LowCardinality(String), String), skew Map(String, Float64)
	) ENGINE = MergeTree ORDER BY (service, ts)`)
	if err != nil {
		t.Fatal(err)
	}
	base := testenv.RecentDay().Add(3*time.Hour + 4*time.Minute + 5123456*time.Microsecond)
	var want []row
	for i := 0; i < 1000; i++ {
		want = append(want, row{
			TS: base.Add(time.Duration(i) * time.Millisecond), TS3: base.Add(time.Duration(i) * time.Second).Truncate(time.Millisecond),
			Service: []string{"billy", "checkout"}[i%2], Endpoint: "/v1/item/" + string(rune('a'+i%26)),
			Latency: uint32(1000 + i), Count: uint64(i) << 33, Status: uint16(200 + i%3), CPU: int16(i%24 - 1), Value: float64(i) / 7,
			TraceID: strings.Repeat(string(rune('a'+i%26)), 16), Tags: []string{"x", "y"}[:i%3%2+1],
			Attrs: map[string]string{"operstate": "down"}, Skew: map[string]float64{"B": 2.1},
		})
	}
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO rt")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range want {
		if err := batch.Append(r.TS, r.TS3, r.Service, r.Endpoint, r.Latency, r.Count, r.Status, r.CPU, r.Value, r.TraceID, r.Tags, r.Attrs, r.Skew); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, "SELECT * FROM rt ORDER BY ts")
	if err != nil {
		t.Fatal(err)
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.TS, &r.TS3, &r.Service, &r.Endpoint, &r.Latency, &r.Count, &r.Status, &r.CPU, &r.Value, &r.TraceID, &r.Tags, &r.Attrs, &r.Skew); err != nil {
			t.Fatal(err)
		}
		r.TS, r.TS3 = r.TS.UTC(), r.TS3.UTC()
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
}

func TestClickHouseGoSeesServerErrors(t *testing.T) {
	addr, db := serve(t, Config{})
	conn := openCH(t, addr, db, "", "")
	err := conn.Exec(context.Background(), "SELECT * FROM no_such_table")
	var ex *clickhouse.Exception
	if !errors.As(err, &ex) || ex.Code != store.CodeUnknownTable {
		t.Fatalf("err = %v, want a clickhouse.Exception with code %d", err, store.CodeUnknownTable)
	}
}

func TestClickHouseGoCancelsAQuery(t *testing.T) {
	addr, db := serve(t, Config{})
	conn := openCH(t, addr, db, "", "")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	rows, err := conn.Query(ctx, "SELECT number, sleepEachRow(0.05) FROM numbers(1000000) SETTINGS max_block_size = 1")
	if err == nil {
		for rows.Next() {
		}
		err = rows.Err()
	}
	if !errors.Is(err, context.DeadlineExceeded) && (err == nil || !strings.Contains(err.Error(), "context deadline exceeded")) {
		t.Fatalf("err = %v, want the context's deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("cancellation took %v", d)
	}
}

func TestRejectsBadCredentials(t *testing.T) {
	addr, db := serve(t, Config{User: "grafana", Password: "s3cret"})
	conn := openCH(t, addr, db, "grafana", "wrong")
	if err := conn.Ping(context.Background()); err == nil {
		t.Fatal("ping with a wrong password succeeded")
	}
	resp, err := http.Get("http://" + addr + "/?query=SELECT+1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("X-ClickHouse-Exception-Code") != "516" {
		t.Fatalf("status %d code %q, want 401 and 516", resp.StatusCode, resp.Header.Get("X-ClickHouse-Exception-Code"))
	}
}

// Plain HTTP use, as curl or Grafana's HTTP mode would do it.
func TestPlainHTTP(t *testing.T) {
	addr, db := serve(t, Config{})
	ddl(t, addr, "CREATE TABLE kv (k String, v UInt32) ENGINE = MergeTree ORDER BY k")
	do := func(method, query, body string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addr+"/?"+query, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	q := func(s string) string { return url.Values{"query": {s}}.Encode() }
	for _, tc := range []struct {
		name, method, query, body string
		wantStatus                int
		wantBody                  string
	}{
		{"create in the body is the migrate user's", "POST", "", "CREATE TABLE kv2 (k String, v UInt32) ENGINE = MergeTree ORDER BY k", 403, "Code: 497. DB::Exception: the ingest user cannot run Create. (ACCESS_DENIED)\n"},
		{"insert with data in the body", "POST", q("INSERT INTO kv FORMAT JSONEachRow"), `{"k":"a","v":1}` + "\n" + `{"k":"b","v":2}`, 200, ""},
		{"insert values in the query", "POST", q("INSERT INTO kv VALUES ('c', 3)"), "", 200, ""},
		{"select with default format", "GET", q("SELECT k, v FROM kv ORDER BY k") + "&default_format=CSV", "", 200, "\"a\",1\n\"b\",2\n\"c\",3\n"},
		{"format clause wins", "GET", q("SELECT sum(v) AS s FROM kv FORMAT JSONEachRow") + "&default_format=CSV", "", 200, "{\"s\":6}\n"},
		{"settings from the URL", "GET", q("SELECT getSetting('max_threads')") + "&max_threads=1", "", 200, "1\n"},
		{"query split between URL and body", "POST", q("SELECT count()"), "FROM kv", 200, "3\n"},
		{"another database from the URL", "GET", q("SELECT 1") + "&database=system", "", 403, "Code: 81. DB::Exception: serve-clickhouse serves the database " + db + " only, not system. (UNKNOWN_DATABASE)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := do(tc.method, tc.query, tc.body)
			if status != tc.wantStatus || body != tc.wantBody {
				t.Fatalf("got %d %q, want %d %q", status, body, tc.wantStatus, tc.wantBody)
			}
		})
	}
	status, h, body := do("GET", q("SELECT nope FROM kv"), "")
	if status != 500 || h.Get("X-ClickHouse-Exception-Code") != "47" || !strings.HasPrefix(body, "Code: 47.") {
		t.Fatalf("error answer: %d %q %q", status, h.Get("X-ClickHouse-Exception-Code"), body)
	}
	if status, _, body := do("GET", "", ""); status != 400 || !strings.Contains(body, "empty query") {
		t.Fatalf("empty query: %d %q", status, body)
	}
	resp, err := http.Get("http://" + addr + "/ping")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "Ok.\n" {
		t.Fatalf("/ping = %q", b)
	}
}
