package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/spikehunt/spikehunt/pipelines/schema"
	"github.com/spikehunt/spikehunt/pipelines/store"
)

// The demo, for now: migrate an embedded store, load a small synthetic fleet,
// and print per-host latency from the per-second rollup. Later issues replace
// the body (the fleet simulator, the detectors, captures), never the name.

type demoFleet struct {
	hosts   int
	minutes int
	rps     int
	seed    uint64
	start   time.Time
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cache, _ := os.UserCacheDir()
	fs := newFlags("demo", "Migrates an embedded store, loads a small synthetic fleet (one host stalls for\na second, as in the thousand-spikes story), and prints per-host latency.\nRe-running within the same hour loads nothing twice: every batch carries a\ndeduplication token.", stderr)
	dsn := fs.String("dsn", "chdb://"+filepath.Join(cache, "spikehunt", "demo")+"?database=demo", "store to use")
	f := demoFleet{}
	fs.IntVar(&f.hosts, "hosts", 8, "hosts in the fleet (2–1000)")
	fs.IntVar(&f.minutes, "minutes", 5, "minutes of traffic (1–120)")
	fs.IntVar(&f.rps, "rps", 20, "requests per second per host (1–2000)")
	seed := fs.Int64("seed", 1, "random seed; the same seed gives the same fleet")
	if err := parse(fs, args); err != nil {
		return err
	}
	if f.hosts < 2 || f.hosts > 1000 || f.minutes < 1 || f.minutes > 120 || f.rps < 1 || f.rps > 2000 {
		fmt.Fprintln(stderr, "--hosts must be 2–1000, --minutes 1–120, --rps 1–2000")
		return errUsage
	}
	f.seed = uint64(*seed)
	// The window ends at the top of the current hour, so data stays inside
	// every retention and a re-run within the hour is the same data.
	f.start = time.Now().UTC().Truncate(time.Hour).Add(-time.Duration(f.minutes) * time.Minute)

	step := func(format string, a ...any) { fmt.Fprintf(stderr, "demo: "+format+"\n", a...) }
	step("opening %s", *dsn)
	st, err := store.Open(ctx, *dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	step("migrating the schema")
	if err := migrate(ctx, st, schema.Options{}, io.Discard); err != nil {
		return err
	}
	step("loading %d hosts × %d min × %d req/s (%d requests)", f.hosts, f.minutes, f.rps, f.hosts*f.minutes*60*f.rps)
	began := time.Now()
	rows, err := f.load(ctx, st)
	if err != nil {
		return err
	}
	step("loaded %d rows in %v", rows, time.Since(began).Round(time.Millisecond))
	return f.report(ctx, st, stdout)
}

// load writes the fleet's requests host by host, one batch per host.
func (f demoFleet) load(ctx context.Context, st store.Store) (int, error) {
	var (
		ts                                    = new(proto.ColDateTime64).WithPrecision(proto.PrecisionMicro)
		service, host, hwClass, endpoint, sts = lc(), lc(), lc(), lc(), lc()
		latency, thread, weight               proto.ColUInt32
		traceID, spanID                       proto.ColFixedStr
	)
	traceID.SetSize(16)
	spanID.SetSize(8)
	input := proto.Input{
		{Name: "ts", Data: ts}, {Name: "service", Data: service}, {Name: "host", Data: host},
		{Name: "hw_class", Data: hwClass}, {Name: "endpoint", Data: endpoint}, {Name: "latency_us", Data: &latency},
		{Name: "status", Data: sts}, {Name: "trace_id", Data: &traceID}, {Name: "span_id", Data: &spanID},
		{Name: "thread_id", Data: &thread}, {Name: "weight", Data: &weight},
	}
	total := 0
	ids := make([]byte, 24)
	for h := 0; h < f.hosts; h++ {
		for _, c := range input {
			c.Data.(proto.Resettable).Reset()
		}
		rng := rand.New(rand.NewPCG(f.seed, uint64(h)))
		name := fmt.Sprintf("demo-%03d", h)
		class := []string{"gen4", "gen5"}[h%2]
		// The last host stalls: one request per second at 1 s for one second
		// in the middle of the window (a library's sleep, seed 004).
		stallAt := -1
		if h == f.hosts-1 {
			stallAt = f.minutes * 30
		}
		for s := 0; s < f.minutes*60; s++ {
			sec := f.start.Add(time.Duration(s) * time.Second)
			for k := 0; k < f.rps; k++ {
				// Lognormal body around 4 ms.
				us := math.Exp(math.Log(4000) + 0.5*rng.NormFloat64())
				if s == stallAt {
					us += 1e6
				}
				ts.Append(sec.Add(time.Duration(k) * time.Second / time.Duration(f.rps)))
				service.Append("billy")
				host.Append(name)
				hwClass.Append(class)
				endpoint.Append([]string{"/get", "/put", "/list"}[k%3])
				latency.Append(uint32(us))
				sts.Append("OK")
				for i := range ids {
					ids[i] = byte(rng.Uint32())
				}
				traceID.Append(ids[:16])
				spanID.Append(ids[16:])
				thread.Append(uint32(1000 + k%16))
				weight.Append(1)
			}
		}
		token := fmt.Sprintf("demo-%d-%s-%d-%d-%d", f.seed, name, f.start.Unix(), f.minutes, f.rps)
		if err := st.Insert(ctx, "requests", input, store.WithSetting("insert_deduplication_token", token)); err != nil {
			return total, fmt.Errorf("insert %s: %w", name, err)
		}
		total += latency.Rows()
	}
	return total, nil
}

func lc() *proto.ColLowCardinality[string] { return new(proto.ColStr).LowCardinality() }

// report prints per-host latency from latency_1s, the detectors' input.
func (f demoFleet) report(ctx context.Context, st store.Store, out io.Writer) error {
	window := fmt.Sprintf("service = 'billy' AND ts >= toDateTime(%d, 'UTC') AND ts < toDateTime(%d, 'UTC')",
		f.start.Unix(), f.start.Add(time.Duration(f.minutes)*time.Minute).Unix())
	q := `SELECT a.host, a.hw, a.n, round(a.q[1] / 1000, 1), round(a.q[2] / 1000, 1), round(a.mx / 1000, 1), b.slow
	FROM (
		SELECT host, any(hw_class) AS hw, sum(weighted_count) AS n,
		       quantilesTDigestWeightedMerge(0.5, 0.99)(quantiles_us) AS q, max(max_us) AS mx
		FROM latency_1s WHERE ` + window + ` GROUP BY host
	) AS a
	JOIN (
		SELECT host, countIf(m > 500000) AS slow
		FROM (SELECT host, ts, max(max_us) AS m FROM latency_1s WHERE ` + window + ` GROUP BY host, ts)
		GROUP BY host
	) AS b USING (host)
	ORDER BY a.host`
	tab, err := store.Select(ctx, st, q)
	if err != nil {
		return fmt.Errorf("query latency_1s: %w", err)
	}
	fmt.Fprintf(out, "per-host latency of service billy, %s – %s UTC\n\n", f.start.Format("15:04"), f.start.Add(time.Duration(f.minutes)*time.Minute).Format("15:04"))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "host\thw_class\trequests\tp50 ms\tp99 ms\tmax ms\tseconds > 500 ms\t")
	for _, r := range tab.Rows {
		for _, v := range r {
			fmt.Fprintf(tw, "%s\t", v)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}
