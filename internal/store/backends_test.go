package store_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/pipelines/services/chhttp"
)

// backends gives the same database through every backend that can run
// here: the embedded engine, and the HTTP server backend talking to
// serve-clickhouse over that engine (with authentication, as the migrate
// user: the tests create their tables through each backend).
func backends(t *testing.T) map[string]store.Store {
	emb := embedded(t)
	srv := httptest.NewServer(chhttp.New(emb, chhttp.Config{User: "spike", Password: "hunt", MigrateUser: "schema", MigratePassword: "hunt"}))
	t.Cleanup(srv.Close)
	dsn := "http://schema:hunt@" + strings.TrimPrefix(srv.URL, "http://") + "/" + emb.Database()
	h, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return map[string]store.Store{"embedded": emb, "http": h}
}

func TestBackendsAgree(t *testing.T) {
	for name, st := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			table := "agree_" + name
			if err := st.Exec(ctx, "CREATE TABLE "+table+` (ts DateTime64(6, 'UTC'), host LowCardinality(String), v Float64,
				tags Array(String), attrs Map(LowCardinality(String), String)) ENGINE = MergeTree ORDER BY (host, ts)`); err != nil {
				t.Fatal(err)
			}
			ts := new(proto.ColDateTime64).WithPrecision(proto.PrecisionMicro)
			host := new(proto.ColStr).LowCardinality()
			var v proto.ColFloat64
			tags := new(proto.ColStr).Array()
			attrs := proto.NewMap[string, string](new(proto.ColStr).LowCardinality(), new(proto.ColStr))
			for i := 0; i < 5000; i++ {
				ts.Append(t0.Add(time.Duration(i) * time.Microsecond))
				host.Append([]string{"a", "b"}[i%2])
				v.Append(float64(i) / 2)
				tags.Append([]string{"x", "y"}[:i%2+1])
				attrs.Append(map[string]string{"operstate": "up"})
			}
			in := proto.Input{{Name: "ts", Data: ts}, {Name: "host", Data: host}, {Name: "v", Data: &v}, {Name: "tags", Data: tags}, {Name: "attrs", Data: attrs}}
			if err := st.Insert(ctx, table, in); err != nil {
				t.Fatal(err)
			}
			tab, err := store.Select(ctx, st, "SELECT host, count(), sum(v), max(ts), sum(length(tags)), any(attrs['operstate']) FROM "+table+" GROUP BY host ORDER BY host")
			if err != nil {
				t.Fatal(err)
			}
			day := t0.Format(time.DateOnly)
			want := [][]string{
				{"a", "2500", "3123750", day + "T00:00:00.004998Z", "2500", "up"},
				{"b", "2500", "3125000", day + "T00:00:00.004999Z", "5000", "up"},
			}
			if strings.Join(flat(tab.Rows), "|") != strings.Join(flat(want), "|") {
				t.Fatalf("got %v, want %v", tab.Rows, want)
			}
			// A ClickHouse error keeps its code through every backend.
			err = st.Exec(ctx, "SELECT * FROM no_such_table")
			if !store.IsCode(err, store.CodeUnknownTable) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %q, want a one-line UNKNOWN_TABLE exception", err)
			}
			// Cancellation.
			cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			err = st.Query(cctx, "SELECT number, sleepEachRow(0.01) FROM numbers(500) SETTINGS max_block_size = 1", func(store.Block) error { return nil })
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("cancelled query: %v", err)
			}
		})
	}
}

func flat(rows [][]string) []string {
	var out []string
	for _, r := range rows {
		out = append(out, strings.Join(r, ","))
	}
	return out
}

func TestBadDSNsAndUnreachableServersGiveOneLineErrors(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"", "no scheme"},
		{"postgres://x", "unknown scheme postgres"},
		{"chdb://", "no data directory"},
		{"clickhouse:///db", "no host"},
		{"http://host:8123/db?bogus=1", "unknown parameter bogus"},
		{"http://host:8123/db?compress=lz4", "native protocol only"},
		{"clickhouse://u:topsecret@host:9000/db?max_conns=0", "max_conns must be 1–64"},
		{"http://127.0.0.1:1/db?dial_timeout=500ms", "unreachable"},
		{"clickhouse://127.0.0.1:1/db?dial_timeout=500ms", "connect to ClickHouse at clickhouse://127.0.0.1:1"},
	} {
		t.Run(tc.dsn, func(t *testing.T) {
			_, err := store.Open(context.Background(), tc.dsn)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "topsecret") {
				t.Fatalf("Open(%q) = %v, want one line containing %q and no password", tc.dsn, err, tc.want)
			}
		})
	}
}

func TestParseDSN(t *testing.T) {
	d, err := store.ParseDSN("clickhouse://ingest:pw@ch.example:9440/spikehunt?secure=true&compress=lz4&max_conns=4")
	if err != nil {
		t.Fatal(err)
	}
	if d.Address != "ch.example:9440" || d.Database != "spikehunt" || d.User != "ingest" || d.Password != "pw" || d.TLS == nil || !d.Compress || d.Connections != 4 {
		t.Fatalf("parsed %+v", d)
	}
	d, err = store.ParseDSN("chdb:///var/lib/spikehunt?database=fleet&pool=2")
	if err != nil || d.Dir != "/var/lib/spikehunt" || d.Database != "fleet" || d.Connections != 2 {
		t.Fatalf("parsed %+v, %v", d, err)
	}
	d, err = store.ParseDSN("https://ch.example/db")
	if err != nil || d.Address != "ch.example:8443" || d.TLS == nil {
		t.Fatalf("parsed %+v, %v", d, err)
	}
}
