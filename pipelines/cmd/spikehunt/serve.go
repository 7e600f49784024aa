package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/pipelines/chhttp"
	"github.com/spikehunt/spikehunt/pipelines/store"
)

func runServeClickHouse(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("serve-clickhouse", "Serves the ClickHouse HTTP interface over an embedded store, for Grafana\nand any ClickHouse client. /metrics and /healthz are served beside it.", stderr)
	dsn := fs.String("dsn", envOr("SPIKEHUNT_DSN", ""), "embedded store, chdb:///path/to/dir (env SPIKEHUNT_DSN)")
	listen := fs.String("listen", "127.0.0.1:8123", "address to listen on")
	user := fs.String("user", envOr("SPIKEHUNT_CLICKHOUSE_USER", ""), "require this user (env SPIKEHUNT_CLICKHOUSE_USER); empty = no authentication")
	password := fs.String("password-env", "SPIKEHUNT_CLICKHOUSE_PASSWORD", "environment variable holding the password (a flag would show in ps)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if !strings.HasPrefix(*dsn, "chdb:") {
		fmt.Fprintln(stderr, "--dsn must name an embedded store (chdb:///path/to/dir): a ClickHouse server already serves its own HTTP interface")
		return errUsage
	}
	st, err := store.Open(ctx, *dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	reg := newRegistry()
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	h := chhttp.New(st.(*store.Embedded), chhttp.Config{User: *user, Password: envOr(*password, ""), Logger: logger})
	mux := observabilityMux(reg, st)
	mux.Handle("/", chhttp.Instrument(h, reg))
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "serving the ClickHouse HTTP interface for %s on http://%s\n", *dsn, ln.Addr())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
