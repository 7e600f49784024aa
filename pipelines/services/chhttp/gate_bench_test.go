package chhttp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// BenchmarkGate compares a panel-sized query (a time series over a million
// rows, as a Grafana panel asks) through the handler as the read-only user,
// gate included, with the same query on the engine alone and with the
// gate's parse alone: handler/(handler − gate) is what the gate costs a
// panel. The machine's load moves all three; compare them within one run.
func BenchmarkGate(b *testing.B) {
	st := testenv.ClickHouse(b)
	const q = "SELECT toStartOfInterval(toDateTime(number), INTERVAL 60 second) AS t, count() AS n, quantile(0.99)(number % 1000) AS p99 " +
		"FROM numbers(1000000) WHERE number % 7 != 3 GROUP BY t ORDER BY t FORMAT JSON"
	srv := httptest.NewServer(New(st, Config{ReadOnlyUser: "grafana", ReadOnlyPassword: "r"}))
	defer srv.Close()
	h := New(st, Config{})
	ctx := context.Background()
	b.Run("handler", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			req, _ := http.NewRequest("GET", srv.URL+"/?"+url.Values{"query": {q}}.Encode(), nil)
			req.SetBasicAuth("grafana", "r")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatal(resp.Status)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "chhttp.panel_query_through_handler_ms:ms")
	})
	b.Run("engine", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := st.QueryRaw(ctx, store.RawStatement{Query: q}, "JSON", io.Discard); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("gate", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, ref := h.admit(ctx, st, q, RoleReadOnly, nil); ref != nil {
				b.Fatal(ref.err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "chhttp.gate_ms_per_query:ms")
	})
}
