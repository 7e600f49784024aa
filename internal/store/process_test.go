package store_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/pipelines/services/chhttp"
)

// Some properties need a fresh process: the engine boots once per process
// and the library loads once. The test binary re-runs itself in a role.

func runRole(role string) int {
	ctx := context.Background()
	dsn := os.Getenv("SPIKEHUNT_STORE_TEST_DSN")
	st, err := store.Open(ctx, dsn)
	if err != nil {
		fmt.Println("OPEN-ERROR:", err)
		return 3
	}
	defer st.Close()
	switch role {
	case "write":
		if err := st.Exec(ctx, "CREATE TABLE IF NOT EXISTS kept (v UInt64) ENGINE = MergeTree ORDER BY v"); err != nil {
			fmt.Println("ERROR:", err)
			return 1
		}
		var v proto.ColUInt64
		for i := 0; i < 12345; i++ {
			v.Append(uint64(i))
		}
		if err := st.Insert(ctx, "kept", proto.Input{{Name: "v", Data: &v}}); err != nil {
			fmt.Println("ERROR:", err)
			return 1
		}
		fmt.Println("WROTE")
	case "read":
		tab, err := store.Select(ctx, st, "SELECT count(), sum(v) FROM kept")
		if err != nil {
			fmt.Println("ERROR:", err)
			return 1
		}
		fmt.Println("READ", strings.Join(tab.Rows[0], " "))
	}
	return 0
}

func inProcess(t *testing.T, role, dsn string, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, "SPIKEHUNT_STORE_TEST_ROLE="+role, "SPIKEHUNT_STORE_TEST_DSN="+dsn)...)
	out, _ := cmd.CombinedOutput()
	return string(out)
}

func TestEmbeddedDataSurvivesARestart(t *testing.T) {
	dsn := "chdb://" + t.TempDir() + "?database=fleet"
	if out := inProcess(t, "write", dsn); !strings.Contains(out, "WROTE") {
		t.Fatalf("writer: %s", out)
	}
	if out := inProcess(t, "read", dsn); !strings.Contains(out, "READ 12345 76193340") {
		t.Fatalf("reader after restart: %s", out)
	}
}

func TestMissingLibraryIsAOneLineErrorAndTheServerBackendStillWorks(t *testing.T) {
	out := inProcess(t, "read", "chdb://"+t.TempDir(), "SPIKEHUNT_LIBCHDB=/nonexistent/libchdb.so")
	line := strings.TrimSpace(out)
	if !strings.HasPrefix(line, "OPEN-ERROR: libchdb.so not found") || !strings.Contains(line, "make deps") || strings.Count(line, "\n") != 0 {
		t.Fatalf("missing library: %q", out)
	}
	// A process without the library serves from a ClickHouse server.
	st := embedded(t)
	if err := st.Exec(context.Background(), "CREATE TABLE kept (v UInt64) ENGINE = MergeTree ORDER BY v"); err != nil {
		t.Fatal(err)
	}
	if err := st.Exec(context.Background(), "INSERT INTO kept SELECT number FROM numbers(10)"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(chhttp.New(st, chhttp.Config{}))
	defer srv.Close()
	out = inProcess(t, "read", srv.URL+"/"+st.Database(), "SPIKEHUNT_LIBCHDB=/nonexistent/libchdb.so")
	if !strings.Contains(out, "READ 10 45") {
		t.Fatalf("http backend without libchdb: %s", out)
	}
}
