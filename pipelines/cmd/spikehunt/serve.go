package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/pipelines/cli"
	"github.com/spikehunt/spikehunt/pipelines/services/chhttp"
	"github.com/spikehunt/spikehunt/pipelines/services/storecare"
)

func runServeClickHouse(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("serve-clickhouse", `Serves the ClickHouse HTTP interface over an embedded store, for Grafana
and any ClickHouse client. /metrics and /healthz are served beside it.
The official clients work at their defaults (clickhouse-connect,
@clickhouse/client, client-v2, clickhouse-go): query parameters, HTTP
compression and ClickHouse's compressed blocks; sessions and external
tables are answered NOT_IMPLEMENTED (docs/reference.md: "ClickHouse clients on
serve-clickhouse").

Statements cannot reach outside the data directory (file(), url(), remote(),
s3() and their table engines, INTO OUTFILE, FROM INFILE, file-naming
settings) unless --allow-external-sources. An address other than loopback
needs a user with a password: --user (read-write, the ingest's) and/or
--read-only-user (Grafana's: SELECT and the like only).

For a Grafana of your own (the demo's store, for one), --grafana-provisioning
DIR writes the data source the dashboards use, on the address this server
listens on and the store's database, and the dashboard provider; then start
Grafana with GF_PATHS_PROVISIONING=DIR and the ClickHouse data source plugin:

  spikehunt serve-clickhouse --dsn "chdb://$HOME/.cache/spikehunt/demo?database=demo" --grafana-provisioning ./grafana

(spikehunt demo prints this line for its own store.)`, stderr)
	dsn := fs.String("dsn", cli.EnvOr("SPIKEHUNT_DSN", ""), "embedded store, chdb:///path/to/dir (env SPIKEHUNT_DSN)")
	listen := fs.String("listen", "127.0.0.1:8123", "address to listen on; any but loopback requires --user or --read-only-user with a password")
	user := fs.String("user", cli.EnvOr("SPIKEHUNT_CLICKHOUSE_USER", ""), "read-write user (env SPIKEHUNT_CLICKHOUSE_USER); with neither user set, every request is read-write, allowed on loopback only")
	password := fs.String("password-env", "SPIKEHUNT_CLICKHOUSE_PASSWORD", "environment variable holding --user's password (a flag would show in ps)")
	roUser := fs.String("read-only-user", cli.EnvOr("SPIKEHUNT_CLICKHOUSE_READONLY_USER", ""), "read-only user for Grafana (env SPIKEHUNT_CLICKHOUSE_READONLY_USER): SELECT, WITH, SHOW, DESCRIBE, EXISTS, EXPLAIN only, run with readonly = 2")
	roPassword := fs.String("read-only-password-env", "SPIKEHUNT_CLICKHOUSE_READONLY_PASSWORD", "environment variable holding --read-only-user's password")
	migUser := fs.String("migrate-user", cli.EnvOr("SPIKEHUNT_CLICKHOUSE_MIGRATE_USER", ""), "the one user that may change the schema (CREATE, ALTER, DROP, ...; env SPIKEHUNT_CLICKHOUSE_MIGRATE_USER); without it no request does")
	migPassword := fs.String("migrate-password-env", "SPIKEHUNT_CLICKHOUSE_MIGRATE_PASSWORD", "environment variable holding --migrate-user's password")
	external := fs.Bool("allow-external-sources", false, "let statements read and write outside the data directory as this process (file, url, remote, s3, ... and their table engines, dictionaries, file-naming settings); only where every client may do that")
	maxExec := fs.Duration("max-execution-time", chhttp.DefaultConfig().MaxExecutionTime, "longest a statement may run (the engine's max_execution_time; a client's larger value is lowered); responses may take this plus 30s to write")
	grafanaDir := fs.String("grafana-provisioning", "", "write Grafana provisioning for this server into this folder: datasources/spikehunt.yaml (HTTP, the bound address,\nthe store's database, signing in as --read-only-user, else --user, password from the same variable)\nand dashboards/spikehunt.yaml (on --grafana-dashboards); point GF_PATHS_PROVISIONING at it")
	grafanaDashboards := fs.String("grafana-dashboards", "", "the dashboards' JSON for --grafana-provisioning (default: dashboards/grafana of the checkout around the working directory,\nelse PREFIX/share/spikehunt/dashboards of the installed binary (make install))")
	maxBlock := fs.Int64("max-compressed-block-bytes", chhttp.DefaultConfig().MaxCompressedBlockBytes, "largest ClickHouse compressed block (decompress=1 request bodies) and zstd window a request may use, compressed or not; most clients write 1 MiB blocks, but clickhouse-go over HTTP\n(the OpenTelemetry Collector's ClickHouse exporter) sends a whole batch as one: raise it to the batches' size (64 KiB to 1 GiB)")
	careEvery := fs.Duration("care.every", storecare.DefaultEvery, "how often the store's care reads the volume's free space and the engine's errors (docs/store-care.md);\n0 turns the care off: a part a full volume broke then stays in its table until the store restarts")
	careSettle := fs.Duration("care.settle", storecare.DefaultSettle, "how old the range of a part taken out must be before its rows are rebuilt from the view that feeds its table,\nso that rows of the range still on their way land first")
	instance := fs.String("instance", "", "the host column of the store's own rows in counters (its volume, the parts it took out; default: the host name)")
	limits := chhttp.DefaultServerLimits(chhttp.DefaultConfig().MaxExecutionTime)
	fs.DurationVar(&limits.Idle, "http-idle-timeout", limits.Idle, "close a keep-alive connection of the HTTP server idle this long")
	fs.IntVar(&limits.MaxConns, "http-max-connections", limits.MaxConns, "serve at most this many HTTP connections at once; a newcomer takes the place of the connection idle longest\n(of its own client IP at --http-max-connections-per-peer, else of the IP holding the most), and is closed on accept only when every one in its way is busy")
	fs.IntVar(&limits.MaxConnsPerPeer, "http-max-connections-per-peer", 0, "HTTP connections one client IP may hold at once (0: a quarter of --http-max-connections, 32 at its default; below it)")
	fs.IntVar(&limits.ReservedConns, "http-reserved-connections", 0, "the last places of --http-max-connections that only connections which have carried an authenticated request may take\n(0: a sixteenth, 8 at its default; -1: none)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if !strings.HasPrefix(*dsn, "chdb:") {
		fmt.Fprintln(stderr, "--dsn must name an embedded store (chdb:///path/to/dir): a ClickHouse server already serves its own HTTP interface")
		return cli.ErrUsage
	}
	cfg := chhttp.Config{User: *user, Password: cli.EnvOr(*password, ""), ReadOnlyUser: *roUser, ReadOnlyPassword: cli.EnvOr(*roPassword, ""),
		MigrateUser: *migUser, MigratePassword: cli.EnvOr(*migPassword, ""),
		MaxExecutionTime: *maxExec, ExternalSources: *external, MaxCompressedBlockBytes: *maxBlock}
	if err := checkServeAuth(*listen, cfg, *password, *roPassword); err != nil {
		fmt.Fprintln(stderr, err)
		return cli.ErrUsage
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return cli.ErrUsage
	}
	if err := limits.Validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return cli.ErrUsage
	}
	if *careEvery < 0 || *careSettle < 0 {
		fmt.Fprintln(stderr, "--care.every and --care.settle must not be negative")
		return cli.ErrUsage
	}
	byExec := chhttp.DefaultServerLimits(*maxExec)
	limits.Read, limits.Write = byExec.Read, byExec.Write
	d, err := store.ParseDSN(*dsn)
	if err != nil {
		return err
	}
	// A pool of the engine's connections per role, so that one role's
	// statements cannot starve another's, and one for the server itself
	// (killing a statement whose client left).
	open := func(conns int) (*store.Embedded, error) {
		return store.OpenEmbedded(ctx, store.EmbeddedConfig{Dir: d.Dir, Database: d.Database, Connections: conns, ExternalSources: *external})
	}
	st, err := open(1)
	if err != nil {
		return err
	}
	defer st.Close()
	pools := chhttp.Pools{Control: st}
	for _, p := range []*chhttp.Engine{&pools.ReadOnly, &pools.Ingest, &pools.Migrate} {
		n := d.Connections
		if p == &pools.Migrate {
			n = 1
		}
		e, err := open(n)
		if err != nil {
			return err
		}
		defer e.Close()
		*p = e
	}
	reg := newRegistry()
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	if *careEvery > 0 {
		// Its own connection: a rebuild may run for a while, and must
		// not wait behind clients nor hold up their statements.
		cst, err := open(1)
		if err != nil {
			return err
		}
		defer cst.Close()
		carer, err := storecare.New(cst, storecare.Config{Dir: d.Dir, Database: cst.Database(), Every: *careEvery, Settle: *careSettle,
			Instance: *instance, Logger: cfg.Logger})
		if err != nil {
			return err
		}
		if err := carer.Register(reg); err != nil {
			return err
		}
		go carer.Run(ctx)
	}
	h := chhttp.NewPools(pools, cfg)
	if err := h.Register(reg); err != nil {
		return err
	}
	// /healthz takes no connection of the engine's (Handler.Healthz), so a
	// busy pool cannot starve the probes, nor a probe a kill.
	mux := metricsMux(reg)
	mux.Handle("/healthz", h.Healthz())
	mux.Handle("/", chhttp.Instrument(h, reg))
	srv, ln, err := chhttp.Listen(*listen, mux, limits, reg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "serving the ClickHouse HTTP interface for %s on http://%s\n", *dsn, ln.Addr())
	if *grafanaDir != "" {
		grafanaUser, grafanaPasswordEnv := cfg.ReadOnlyUser, *roPassword
		if grafanaUser == "" {
			grafanaUser, grafanaPasswordEnv = cfg.User, *password
		}
		if err := writeGrafana(stdout, stderr, *grafanaDir, ln.Addr().String(), st.Database(), grafanaUser, grafanaPasswordEnv, *grafanaDashboards); err != nil {
			ln.Close()
			return err
		}
	}
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

// writeGrafana writes the provisioning files for a Grafana that reaches
// this server on addr and says how to start Grafana on them.
func writeGrafana(stdout, stderr io.Writer, dir, addr, database, user, passwordEnv, dashboardsDir string) error {
	dashboards := chhttp.FindDashboards(dashboardsDir)
	p, err := chhttp.NewGrafanaProvisioning(addr, database, user, passwordEnv, dashboards)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("--grafana-provisioning %s: %w", dir, err)
	}
	paths, err := p.Write(abs)
	if err != nil {
		return err
	}
	signIn := "no user"
	if p.User != "" {
		signIn = fmt.Sprintf("user %s, password from $%s in Grafana's environment", p.User, p.PasswordEnv)
	}
	fmt.Fprintf(stdout, "Grafana provisioning (data source http://%s:%s, database %s, %s): %s\n",
		p.Host, p.Port, p.Database, signIn, strings.Join(paths, ", "))
	if dashboards == "" {
		fmt.Fprintf(stderr, "no dashboards/grafana/*.json around the working directory nor in %s: pass --grafana-dashboards (the checkout's dashboards/grafana or the chart's files/dashboards), or install them with make install, to provision the dashboards too\n",
			strings.Join(chhttp.DashboardsBesideBinary(), " or "))
	}
	fmt.Fprintf(stdout, "Start Grafana with: GF_PATHS_PROVISIONING=%s GF_PLUGINS_PREINSTALL=grafana-clickhouse-datasource grafana server\n", abs)
	return nil
}

// checkServeAuth refuses to serve an address other than loopback without a
// user that has a password: anyone who reaches the port would otherwise run
// statements as the store's owner.
func checkServeAuth(listen string, cfg chhttp.Config, passwordEnv, roPasswordEnv string) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", listen, err)
	}
	if isLoopback(host) {
		return nil
	}
	if !cfg.AuthRequired() {
		return fmt.Errorf("--listen %s is not a loopback address: set --user (password in $%s) and/or --read-only-user (password in $%s), or listen on 127.0.0.1", listen, passwordEnv, roPasswordEnv)
	}
	if cfg.User != "" && cfg.Password == "" {
		return fmt.Errorf("--listen %s is not a loopback address and --user %s has no password: set $%s", listen, cfg.User, passwordEnv)
	}
	if cfg.MigrateUser != "" && cfg.MigratePassword == "" {
		return fmt.Errorf("--listen %s is not a loopback address and --migrate-user %s has no password: set its --migrate-password-env variable", listen, cfg.MigrateUser)
	}
	if cfg.ReadOnlyUser != "" && cfg.ReadOnlyPassword == "" {
		return fmt.Errorf("--listen %s is not a loopback address and --read-only-user %s has no password: set $%s", listen, cfg.ReadOnlyUser, roPasswordEnv)
	}
	return nil
}

// isLoopback: "localhost" or a loopback IP; "" (every interface) is not.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
