package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// chClients returns the folder of the official ClickHouse clients,
// installing them first (deps/install.sh chclients: pinned, cached, so
// offline after the first time) when they are not there. No skip: a client
// that cannot be installed fails the test, saying why.
func chClients(t *testing.T) string {
	t.Helper()
	paths, err := testenv.Paths()
	if err != nil {
		t.Fatal(err)
	}
	if dir, err := paths.ChClientsDir(); err == nil {
		return dir
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(root, "deps", "install.sh"), "chclients").CombinedOutput()
	if err != nil {
		t.Fatalf("the official ClickHouse clients are not installed and deps/install.sh chclients failed: %v\n%s", err, out)
	}
	dir, err := paths.ChClientsDir()
	if err != nil {
		t.Fatalf("deps/install.sh chclients ran but %v\n%s", err, out)
	}
	return dir
}

// step is one line a client script prints: its step name and results.
type step map[string]any

// clientSteps are the results every client must print, whatever its
// language; quote is the length of the string parameter it echoes back.
func clientSteps(quote string, compressed ...string) map[string]step {
	want := map[string]step{
		"query":               {"rows": []any{[]any{"0", "0"}, []any{"1", "1"}, []any{"2", "2"}}},
		"insert":              {"count": "1000", "sum": "499500"},
		"params":              {"count": "50", "sum": "37400"},
		"params_quote":        {"echoed": true, "length": quote},
		"error_unknown_table": {"code": "60"},
		"error_bad_param":     {"code": "457"},
		// A statement that needs a session.
		"error_not_implemented": {"code": "48"},
	}
	for _, c := range compressed {
		// 200,000 rows is more than one compressed block (1 MiB) and more
		// than one of the engine's streamed chunks.
		want["compressed_"+c] = step{"rows": "200000", "sum": "19999900000", "inserted": "1000"}
	}
	return want
}

// The official ClickHouse clients, each at its default settings, against
// a real `spikehunt serve-clickhouse` (authentication on) on the real
// engine: a query, a query with parameters (and a value full of quotes,
// which must come back unchanged), the client's default insert, an insert
// and a 200,000-row read with compression both ways, and errors whose
// codes surface in the client's exception. On the old code
// clickhouse-connect's parameters were refused ("query parameters are not
// supported"), its default lz4-encoded insert was parsed as SQL, client-v2's
// default compress=1 was refused (NOT_IMPLEMENTED) and its default format
// (RowBinaryWithNamesAndTypes, asked in a header) came back as
// TabSeparated. /metrics shows which compression each client really used.
func TestOfficialClickHouseClientsWorkAtTheirDefaults(t *testing.T) {
	dir := chClients(t)
	scripts, err := filepath.Abs("testdata/clients")
	if err != nil {
		t.Fatal(err)
	}
	// The scripts create their table, so they sign in as the one user
	// that may change the schema; the ingest user is there as in a real
	// install.
	const user, password = "schema", "pass with 'quotes' and spaces"
	t.Setenv("SPIKEHUNT_CLICKHOUSE_PASSWORD", "ingest's own")
	t.Setenv("SPIKEHUNT_CLICKHOUSE_MIGRATE_PASSWORD", password)
	clients := []struct {
		name    string
		command []string
		env     []string
		want    map[string]step
		// compressed lists metric series (direction/format) that must have
		// counted at least one body.
		compressed []string
	}{
		{
			name:       "clickhouse-connect",
			command:    []string{filepath.Join(dir, "py", "bin", "python"), filepath.Join(scripts, "client.py")},
			want:       withStep(clientSteps("37", "lz4", "zstd"), "params_form", step{"count": "50", "sum": "37400"}),
			compressed: []string{"request/lz4", "request/zstd", "response/gzip", "response/lz4", "response/zstd"},
		},
		{
			name:       "@clickhouse/client",
			command:    []string{"node", filepath.Join(scripts, "client.mjs")},
			env:        []string{"NODE_PATH=" + filepath.Join(dir, "js", "node_modules")},
			want:       clientSteps("37", "gzip"),
			compressed: []string{"request/gzip", "response/gzip"},
		},
		{
			name:       "client-v2",
			command:    []string{"java", "-cp", filepath.Join(dir, "java", "libs") + "/*", filepath.Join(scripts, "ClientCheck.java")},
			want:       clientSteps("34", "lz4"),
			compressed: []string{"request/clickhouse_blocks", "response/clickhouse_blocks"},
		},
	}
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			addr := startServeOn(t, "chdb://"+t.TempDir()+"?database=conformance", "--user", "ingest", "--migrate-user", user)
			host, port, _ := net.SplitHostPort(addr)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, c.command[0], c.command[1:]...)
			cmd.Env = append(append(os.Environ(), "SH_HOST="+host, "SH_PORT="+port, "SH_USER="+user, "SH_PASSWORD="+password,
				"SH_DATABASE=conformance", "SH_TABLE=conformance_t"), c.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			start := time.Now()
			out, err := cmd.Output()
			t.Logf("%s ran in %v", c.name, time.Since(start).Round(time.Millisecond))
			if err != nil {
				t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", c.name, err, out, tail(stderr.String(), 4000))
			}
			got := map[string]step{}
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				var s step
				if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
					t.Fatalf("%s printed %q: %v", c.name, sc.Text(), err)
				}
				name, _ := s["step"].(string)
				delete(s, "step")
				if msg, ok := s["message"]; ok {
					t.Logf("%s: %s", name, msg)
					delete(s, "message")
				}
				got[name] = s
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("%s's steps (-want +got):\n%s\nstderr:\n%s", c.name, diff, tail(stderr.String(), 4000))
			}
			counts := compressedBodies(t, addr)
			for _, series := range c.compressed {
				if counts[series] < 1 {
					t.Errorf("%s sent or received no %s bodies; spikehunt_chhttp_compressed_bodies_total: %v", c.name, series, counts)
				}
			}
		})
	}
}

func withStep(steps map[string]step, name string, s step) map[string]step {
	steps[name] = s
	return steps
}

var compressedSeries = regexp.MustCompile(`(?m)^spikehunt_chhttp_compressed_bodies_total\{direction="([a-z]+)",format="([a-z0-9_]+)"\} ([0-9.e+]+)$`)

// compressedBodies reads spikehunt_chhttp_compressed_bodies_total from
// serve-clickhouse's /metrics, by "direction/format".
func compressedBodies(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]float64{}
	for _, m := range compressedSeries.FindAllStringSubmatch(string(b), -1) {
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatal(err)
		}
		counts[m[1]+"/"+m[2]] = v
	}
	return counts
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("…%s", s[len(s)-n:])
}
