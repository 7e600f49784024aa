package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/pipelines/cli"
)

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("migrate", "Applies the pending schema migrations; a second run is a no-op. A failed\nmigration is not recorded, and a re-run resumes at it.", stderr)
	dsn := fs.String("dsn", cli.EnvOr("SPIKEHUNT_DSN", ""), "store to migrate (env SPIKEHUNT_DSN)")
	var o schema.Options
	fs.StringVar(&o.Database, "database", "", "database for every table (default: the DSN's database)")
	fs.StringVar(&o.Cluster, "cluster", "", "render cluster DDL (ON CLUSTER, Replicated*, Distributed) for this cluster name")
	fs.IntVar(&o.RequestsTTLDays, "requests-ttl-days", schema.DefaultRequestsTTLDays, "days raw requests are kept")
	fs.IntVar(&o.LatencyTTLDays, "latency-ttl-days", schema.DefaultLatencyTTLDays, "days the per-second rollup is kept")
	fs.IntVar(&o.CountersTTLDays, "counters-ttl-days", schema.DefaultCountersTTLDays, "days kernel counters are kept")
	fs.IntVar(&o.DetectionsTTLDays, "detections-ttl-days", schema.DefaultDetectionsTTLDays, "days spikes and patterns are kept")
	fs.IntVar(&o.CapturesTTLDays, "captures-ttl-days", schema.DefaultCapturesTTLDays, "days capture index rows are kept")
	printOnly := fs.Bool("print", false, "print the statements instead of applying them")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if *printOnly {
		if o.Cluster != "" && o.Database == "" {
			fmt.Fprintln(stderr, "--cluster with --print needs --database: Distributed tables name their database")
			return cli.ErrUsage
		}
		list, err := schema.Render(o)
		if err != nil {
			return err
		}
		for _, m := range list {
			fmt.Fprintf(stdout, "-- %04d %s\n", m.Version, m.Name)
			for _, s := range m.Statements {
				fmt.Fprintf(stdout, "%s;\n\n", s)
			}
		}
		return nil
	}
	if *dsn == "" {
		fmt.Fprintln(stderr, "--dsn is required (or set SPIKEHUNT_DSN)")
		return cli.ErrUsage
	}
	st, err := store.Open(ctx, *dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	return migrate(ctx, st, o, stdout)
}

// migrate applies the migrations and reports each applied version.
func migrate(ctx context.Context, st store.Store, o schema.Options, out io.Writer) error {
	names := map[int]string{}
	for _, m := range schema.Default() {
		names[m.Version] = m.Name
	}
	applied, err := schema.Apply(ctx, st, o)
	for _, v := range applied {
		fmt.Fprintf(out, "applied %04d %s\n", v, names[v])
	}
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintf(out, "schema is up to date (%d migrations)\n", len(names))
	}
	return nil
}
