package soak

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// The targets of docs/soak.md.
const (
	maxDriftPct  = 10
	detectEvery  = 30 * time.Second
	maxDetectLag = 2 * detectEvery
	stepLimit    = 3 * time.Minute // a step's recovery, or it failed
	// controlLimit replaces stepLimit in a control run, whose left-out
	// recoveries never come: twice the slowest recovery measured (the
	// ingest's restart, about 47 s), so that a present one still fits.
	controlLimit  = 90 * time.Second
	drainLimit    = 5 * time.Minute // the pipeline's drain after the load stops
	sampleEvery   = 10 * time.Second
	defaultMinute = 30
)

// stepNames are the fault steps, in their order.
var stepNames = []string{"broker-kill", "ingest-kill", "store-restart", "store-disk-full", "spool-disk-full", "clock-step"}

// soak is the running loop.
type soak struct {
	t                              *testing.T
	log                            *logger
	cluster                        *testenv.KafkaCluster
	storeDir, storeAddr, chdb, dsn string
	ingestAddr, detectAddr         string
	storeDisk                      string

	mu            sync.Mutex // guards the procs, which steps replace
	store, ingest *testenv.Proc
	detect        *testenv.Proc
	agents        []*agent
	fleet         *fleet
	st            store.Store
	windows       []window // the faults, for the detector's lag
	accounted     []accounted
	samples       []sample
}

// window is a fault's span: from its start until its recovery was seen.
type window struct {
	name     string
	from, to time.Time
}

// accounted is a range of an agent's requests that a fault refused on
// purpose, with a counted reason; the soak finds how many of them are
// missing and calls those refused, not lost.
type accounted struct {
	a       *agent
	lo, hi  int64
	why     string
	counted float64 // what the component's own counter says it refused
}

// sample is one reading of every component, every sampleEvery.
type sample struct {
	at        time.Time
	rss       map[string]int64 // KiB by component
	heapGoal  map[string]int64 // bytes by Go component with /metrics: the GC's next goal, twice the heap live at the last GC
	detectLag float64          // s, -1 when unknown
}

func TestSoak(t *testing.T) {
	if os.Getenv(soakEnv) != "1" {
		t.Logf("the soak runs under make soak (%s=1)", soakEnv)
		return
	}
	if os.Geteuid() != 0 {
		testenv.RequirePrivileged(t, "root (tmpfs volumes for the disk-full steps)", fmt.Errorf("euid %d", os.Geteuid()))
	}
	minutes := float64(defaultMinute)
	if v := os.Getenv("SOAK_MINUTES"); v != "" {
		m, err := strconv.ParseFloat(v, 64)
		if err != nil || m < 4 {
			t.Fatalf("SOAK_MINUTES=%q: want a number of minutes, at least 4", v)
		}
		minutes = m
	}
	hosts, rps := envInt(t, "SOAK_HOSTS", 1000), envFloat(t, "SOAK_HOST_RPS", 30)
	total := time.Duration(minutes * float64(time.Minute))
	s := &soak{t: t, log: &logger{t: t, t0: time.Now()}}
	s.start(t, hosts, rps)
	began := time.Now()
	end := began.Add(total)
	s.log.printf("soak: %s, %d simulated hosts at %.0f requests/s each, 2 agent binaries at %d requests/s each; faults in the first third", total, hosts, rps, agentRate)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { s.sampleLoop(stop) })
	wg.Go(func() { s.heapProfiles(stop, began, end) })

	// The faults fill the first third, so that the last two thirds, over
	// which the memory drift is taken, run on the processes the last
	// restart left; each step begins after a steady stretch.
	steps := []struct {
		name string
		run  func(skip bool) error
	}{
		{"broker-kill", s.brokerKill},
		{"ingest-kill", s.ingestKill},
		{"store-restart", s.storeRestart},
		{"store-disk-full", s.storeDiskFull},
		{"spool-disk-full", s.spoolDiskFull},
		{"clock-step", s.clockStep},
	}
	gap := max(20*time.Second, total/3/time.Duration(len(steps)+1)/2)
	var toSkip []string
	if *skipRecovery != "" {
		toSkip = strings.Split(*skipRecovery, ",")
		for _, n := range toSkip {
			if !slices.Contains(stepNames, n) {
				t.Fatalf("-soak.skip-recovery: no step %q (steps: %s)", n, strings.Join(stepNames, ", "))
			}
		}
	}
	skipped := 0
	for _, st := range steps {
		time.Sleep(gap)
		skip := slices.Contains(toSkip, st.name)
		from := time.Now()
		s.log.printf("step %s: begins%s", st.name, map[bool]string{true: " (control run: its recovery left out)"}[skip])
		err := st.run(skip)
		to := time.Now()
		s.mu.Lock()
		s.windows = append(s.windows, window{st.name, from, to})
		s.mu.Unlock()
		if err != nil {
			t.Errorf("step %s: %v", st.name, err)
			s.log.printf("step %s: FAILED after %.1f s: %v", st.name, to.Sub(from).Seconds(), err)
		} else {
			s.log.printf("step %s: recovered, %.1f s from its start", st.name, to.Sub(from).Seconds())
		}
		if skip {
			skipped++
		}
		if skipped == len(toSkip) && skipped > 0 {
			// A control run ends after its last left-out recovery: the
			// steps after it would only show that one's damage again.
			s.log.printf("soak: control run: the schedule ends here")
			end = time.Now()
			break
		}
	}
	if d := time.Until(end); d > 0 {
		s.log.printf("soak: faults done; steady until the end, %s from now", d.Round(time.Second))
		time.Sleep(d)
	} else if d < 0 && skipped == 0 {
		// A short soak's faults outlast its minutes: the thirds and the
		// rates are taken over what ran.
		s.log.printf("soak: the faults ran %s past SOAK_MINUTES; the drift's thirds cover them too", (-d).Round(time.Second))
		end = time.Now()
	}
	close(stop)
	wg.Wait()
	s.finish(t, began, end)
}

func envInt(t testing.TB, name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive integer", name, v)
		}
		return n
	}
	return def
}

func envFloat(t testing.TB, name string, def float64) float64 {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a positive number", name, v)
		}
		return n
	}
	return def
}

var ingestStarted = regexp.MustCompile(`spikehunt ingest: .* metrics http://`)

// start brings up the loop: cluster, topics, store, ingest, detector,
// the two agents and their loads, the fleet.
func (s *soak) start(t *testing.T, hosts int, rps float64) {
	base := t.TempDir()
	c, err := testenv.StartKafkaCluster(testenv.KafkaClusterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.cluster = c
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.LogTails(20))
		}
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, topic := range []string{"otlp_spans", "otlp_metrics"} {
		if err := c.CreateTopic(ctx, topic, 3); err != nil {
			t.Fatal(err)
		}
	}
	// The store's volume: a tmpfs big enough for the run's rows many
	// times over, small enough to fill in a moment.
	s.storeDisk = testenv.MountTmpfs(t, base, "store-volume", "2g")
	s.storeDir = filepath.Join(s.storeDisk, "store")
	s.chdb = "chdb://" + s.storeDir + "?database=spikehunt"
	if out, err := exec.Command(spikehuntBin, "migrate", "--dsn", s.chdb).CombinedOutput(); err != nil {
		t.Fatalf("spikehunt migrate: %v\n%s", err, out)
	}
	s.storeAddr = freeAddr(t)
	s.store = testenv.StartProc(t, "store", spikehuntBin, "serve-clickhouse", "--dsn", s.chdb, "--listen", s.storeAddr)
	s.store.WaitFor(t, servingOn, time.Minute)
	s.dsn = "http://" + s.storeAddr + "/spikehunt"
	if s.st, err = store.Open(context.Background(), s.dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.st.Close() })

	s.ingestAddr = freeAddr(t)
	s.ingest = testenv.StartProc(t, "ingest", spikehuntBin, append([]string{"ingest", "--dsn", s.dsn, "--listen", s.ingestAddr, "--instance", "soak",
		"--batch.delay", "1s", "--debug.pprof"}, tlsFlags(c)...)...)
	s.ingest.WaitFor(t, ingestStarted, time.Minute)

	s.detectAddr = freeAddr(t)
	s.detect = testenv.StartProc(t, "detect", spikehuntBin, "detect", "--dsn", s.dsn, "--every", detectEvery.String(), "--since", "10m",
		"--listen", s.detectAddr, "--instance", "soak-detect")

	spoolB := testenv.MountTmpfs(t, base, "spool-volume", "32m")
	s.agents = []*agent{
		startAgent(t, c, base, "soak-a", 0xa1, filepath.Join(base, "spool-a")),
		startAgent(t, c, base, "soak-b", 0xb2, filepath.Join(spoolB, "spool")),
	}
	s.fleet = startFleet(t, c, hosts, rps, s.log)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		if n, err := s.count(ctx, "host = 'soak-a'"); err == nil && n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no request of soak-a reached the store within two minutes")
		}
	}
}

// limit is how long a step waits for its recovery.
func limit() time.Duration {
	if *skipRecovery != "" {
		return controlLimit
	}
	return stepLimit
}

// count is the requests rows matching where.
func (s *soak) count(ctx context.Context, where string) (int64, error) {
	tab, err := store.Select(ctx, s.st, "SELECT count() FROM requests WHERE "+where)
	if err != nil {
		return 0, err
	}
	var n int64
	_, err = fmt.Sscan(tab.Rows[0][0], &n)
	return n, err
}

// flowing waits until rows of host with a time after from land in the
// store: the chain carries requests again.
func (s *soak) flowing(host string, from time.Time) error {
	where := fmt.Sprintf("host = '%s' AND ts > toDateTime64('%s', 6, 'UTC')", host, from.UTC().Format("2006-01-02 15:04:05.000000"))
	var last error
	for deadline := time.Now().Add(limit()); time.Now().Before(deadline); time.Sleep(time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		n, err := s.count(ctx, where)
		cancel()
		if err == nil && n > 0 {
			return nil
		}
		last = err
	}
	return fmt.Errorf("no request of %s after %s stored within %v (last error: %v)", host, from.Format(time.TimeOnly), limit(), last)
}

// pids is each component's process id now.
func (s *soak) pids() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string]int{"store": s.store.PID(), "ingest": s.ingest.PID(), "detect": s.detect.PID()}
	for _, a := range s.agents {
		m["agent_"+strings.TrimPrefix(a.name, "soak-")] = a.p.PID()
	}
	for i := range testenv.KafkaClusterNodes {
		m[fmt.Sprintf("broker%d", i)] = s.cluster.PID(i)
	}
	return m
}

// heapProfiles keeps the ingest's heap profile at the start of the
// middle third, of the last third and at the end, in the test's artifact
// directory (make soak keeps it in .cache/soak-artifacts): what grew
// between two is go tool pprof -top -diff_base=<earlier> <later>.
func (s *soak) heapProfiles(stop chan struct{}, began, end time.Time) {
	third := end.Sub(began) / 3
	dir := s.t.ArtifactDir()
	for i, at := range []time.Time{began.Add(third), began.Add(2 * third), end.Add(-sampleEvery)} {
		select {
		case <-stop:
			return
		case <-time.After(time.Until(at)):
		}
		name := filepath.Join(dir, fmt.Sprintf("ingest-heap-%d.pb.gz", i+1))
		if err := fetchTo("http://"+s.ingestAddr+"/debug/pprof/heap?gc=1", name); err != nil {
			s.log.printf("heap profile %d of the ingest: %v", i+1, err)
			continue
		}
		s.log.printf("heap profile %d of the ingest: %s", i+1, name)
	}
}

func (s *soak) sampleLoop(stop chan struct{}) {
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		smp := sample{at: time.Now(), rss: map[string]int64{}, heapGoal: map[string]int64{}, detectLag: -1}
		for name, pid := range s.pids() {
			smp.rss[name] = rssKiB(pid)
		}
		if m, err := scrape("http://" + s.ingestAddr + "/metrics"); err == nil {
			smp.heapGoal["ingest"] = int64(sum(m, "go_memstats_next_gc_bytes"))
		}
		// The detector's lag: how old the end of the newest range a pass
		// judged is now (its last pass's end is the pass's finish minus
		// spikehunt_detect_behind_seconds).
		if m, err := scrape("http://" + s.detectAddr + "/metrics"); err == nil {
			smp.heapGoal["detect"] = int64(sum(m, "go_memstats_next_gc_bytes"))
			if last := sum(m, "spikehunt_detect_last_pass_timestamp_seconds"); last > 0 {
				end := last - sum(m, "spikehunt_detect_behind_seconds")
				smp.detectLag = float64(smp.at.UnixNano())/1e9 - end
			}
		}
		s.mu.Lock()
		s.samples = append(s.samples, smp)
		s.mu.Unlock()
	}
}

// ---- The fault steps. Each returns once its recovery was seen, or an
// error; skip leaves the recovery out (the control run).

// broker-kill: the leader of a spans partition is killed with kill -9;
// the cluster carries on with two; the node is started again and the
// partitions are back on three.
func (s *soak) brokerKill(skip bool) error {
	ctx := context.Background()
	leader, err := s.cluster.Leader(ctx, "otlp_spans", 0)
	if err != nil {
		return err
	}
	if err := s.cluster.Kill(leader); err != nil {
		return err
	}
	s.log.printf("broker-kill: node %d killed (kill -9)", leader)
	t0 := time.Now()
	if err := s.flowing("soak-a", t0); err != nil {
		return fmt.Errorf("with node %d down: %w", leader, err)
	}
	time.Sleep(15 * time.Second) // a while on two brokers
	if !skip {
		if err := s.cluster.Start(ctx, leader); err != nil {
			return err
		}
		s.log.printf("broker-kill: node %d started again", leader)
	}
	wctx, cancel := context.WithTimeout(ctx, limit())
	defer cancel()
	if err := s.cluster.WaitInSync(wctx, "otlp_spans", "otlp_metrics", "__consumer_offsets"); err != nil {
		return fmt.Errorf("partitions not back on three nodes: %w", err)
	}
	return nil
}

// ingest-kill: the ingest is killed with kill -9 mid-batch; its
// supervisor starts it again after 5 s; the new run re-forms the batches
// the dead one left (none lost, none twice: counted at the end).
func (s *soak) ingestKill(skip bool) error {
	s.mu.Lock()
	old := s.ingest
	s.mu.Unlock()
	old.Kill9()
	t0 := time.Now()
	s.log.printf("ingest-kill: killed (kill -9)")
	if skip {
		time.Sleep(30 * time.Second)
		return s.flowing("soak-a", t0)
	}
	time.Sleep(5 * time.Second) // the supervisor's restart delay
	p := old.Again(s.t)
	s.mu.Lock()
	s.ingest = p
	s.mu.Unlock()
	p.WaitFor(s.t, ingestStarted, time.Minute)
	return s.flowing("soak-a", t0)
}

// store-restart: serve-clickhouse stopped (SIGTERM) and started again on
// the same data and address; the ingest retries its batches and the
// detector its pass meanwhile.
func (s *soak) storeRestart(skip bool) error {
	s.mu.Lock()
	old := s.store
	s.mu.Unlock()
	old.Stop(time.Minute)
	t0 := time.Now()
	s.log.printf("store-restart: stopped")
	time.Sleep(5 * time.Second)
	if !skip {
		if err := s.restartStore(); err != nil {
			return err
		}
	}
	return s.flowing("soak-a", t0)
}

func (s *soak) restartStore() error {
	s.mu.Lock()
	old := s.store
	s.mu.Unlock()
	p := old.Again(s.t)
	s.mu.Lock()
	s.store = p
	s.mu.Unlock()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if servingOn.MatchString(p.Out.String()) {
			s.log.printf("store: serving again")
			return nil
		}
		if !p.Alive() {
			break
		}
	}
	return fmt.Errorf("the store did not serve again:\n%s", testenv.Tail(p.Out.String(), 20))
}

// store-disk-full: the store's volume fills up. Inserts fail; the ingest
// keeps its batches and retries them (its offsets stay uncommitted), and
// says so: spikehunt_ingest_errors_total{step="insert"} rising, the
// alertable state of docs/pipeline-health.md. Once the space is freed the
// retries land. A store that exits on the full disk is started again by
// its supervisor.
func (s *soak) storeDiskFull(skip bool) error {
	fill := filepath.Join(s.storeDisk, "fill")
	before, _ := scrape("http://" + s.ingestAddr + "/metrics")
	n, err := testenv.FillDisk(fill)
	if err != nil {
		return err
	}
	t0 := time.Now()
	s.log.printf("store-disk-full: %d MiB written to the store's volume before ENOSPC", n>>20)
	// The disk stays full: the store's merges free a part now and then,
	// and a disk filled once lets its inserts into that room, so what
	// fills it (a runaway log, another tenant) takes every freed byte.
	hog := keepFull(fill + "-more")
	defer func() { hog() }() // the control run replaces hog
	// Held until the ingest has said so, at most a minute.
	var said float64
	var state string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		if m, err := scrape("http://" + s.ingestAddr + "/metrics"); err == nil {
			said = sum(m, "spikehunt_ingest_errors_total") - sum(before, "spikehunt_ingest_errors_total")
			state = fmt.Sprintf("intent %.0f, insert %.0f, commit %.0f", sum(m, "spikehunt_ingest_errors_total", `step="intent"`),
				sum(m, "spikehunt_ingest_errors_total", `step="insert"`), sum(m, "spikehunt_ingest_errors_total", `step="commit"`))
		}
		if said > 0 && time.Since(t0) > 30*time.Second {
			break
		}
	}
	s.log.printf("store-disk-full: the ingest counted %.0f failed steps (spikehunt_ingest_errors_total: %s); store running: %v", said, state, s.storeAlive())
	s.log.printf("store-disk-full: the dashboard's freshness: %s", s.freshness())
	if skip {
		// The control run: the disk stays full to the end of the soak.
		hog = func() {}
	}
	var errState error
	if said == 0 {
		errState = errors.New("the ingest did not count a failed step while the store's volume was full: no alertable state")
	}
	if skip {
		return errors.Join(errState, s.flowing("soak-a", time.Now()))
	}
	hog()
	if err := errors.Join(os.Remove(fill), os.Remove(fill+"-more")); err != nil {
		return errors.Join(errState, err)
	}
	s.log.printf("store-disk-full: the space freed")
	if !s.storeAlive() {
		s.log.printf("store-disk-full: the store had exited on the full disk; its supervisor starts it again")
		if err := s.restartStore(); err != nil {
			return errors.Join(errState, err)
		}
	}
	if err := s.flowing("soak-a", time.Now()); err != nil {
		return errors.Join(errState, err)
	}
	// Rows flowing is not the whole recovery: a part the engine committed
	// on the full volume may be unreadable, and every statement touching
	// it fails until the store's care takes it out (docs/store-care.md).
	err = s.partsReadable(t0.Add(-time.Minute), 3*time.Minute)
	if m, merr := scrape("http://" + s.storeAddr + "/metrics"); merr == nil {
		s.log.printf("store-disk-full: the store's care: %.0f parts read, %.0f taken out, %.0f rebuilt, %.0f rows lost, %.0f pending",
			sum(m, "spikehunt_store_parts_verified_total"), sum(m, "spikehunt_store_parts_detached_total"), sum(m, "spikehunt_store_parts_rebuilt_total"),
			sum(m, "spikehunt_store_rows_lost_total"), sum(m, "spikehunt_store_repairs_pending"))
	}
	return errors.Join(errState, err)
}

// partsReadable waits until every part of the store's tables written
// since t reads whole (every column of every row), at most within.
func (s *soak) partsReadable(since time.Time, within time.Duration) error {
	var last error
	for deadline := time.Now().Add(within); ; time.Sleep(10 * time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		last = nil
		for _, table := range []string{"latency_1m", "latency_1s", "requests", "counters"} {
			q := fmt.Sprintf("SELECT count() FROM %s WHERE _part IN (SELECT name FROM system.parts WHERE database = currentDatabase() AND table = '%s' AND active "+
				"AND modification_time >= toDateTime(%d)) AND NOT ignore(*)", table, table, since.Unix())
			if _, err := store.Select(ctx, s.st, q); err != nil {
				last = fmt.Errorf("%s: %w", table, err)
				break
			}
		}
		cancel()
		if last == nil {
			s.log.printf("store-disk-full: every part written since the volume filled reads whole")
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("a part written while the store's volume was full is still unreadable after %v: %w", within, last)
		}
		s.log.printf("store-disk-full: not every part reads yet: %v", last)
	}
}

// freshness is what the pipeline-health dashboard's "Newest latency
// second, behind the range end" shows now, for soak-a.
func (s *soak) freshness() string {
	return s.query("SELECT dateDiff('second', max(ts), now()) FROM latency_1s WHERE host = 'soak-a'") + " s behind"
}

// query is the first cell of q's answer, or the error, for the log.
func (s *soak) query(q string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tab, err := store.Select(ctx, s.st, q)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if len(tab.Rows) == 0 || len(tab.Rows[0]) == 0 {
		return "(no rows)"
	}
	return tab.Rows[0][0]
}

func (s *soak) storeAlive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.store.Alive()
}

// spool-disk-full: soak-b's spool volume fills up. Every export request
// goes through the spool, so the agent drops what it cannot append and
// counts it (spikehunt_export_errors_total{reason="spool"},
// spikehunt_export_records_total{outcome="dropped"}); those requests are
// accounted as refused, not lost. Once the space is freed it spools and
// sends again, without a restart.
func (s *soak) spoolDiskFull(skip bool) error {
	b := s.agents[1]
	fill := filepath.Join(filepath.Dir(b.spool), "fill")
	n, err := testenv.FillDisk(fill)
	if err != nil {
		return err
	}
	t0 := time.Now()
	s.log.printf("spool-disk-full: %d MiB written to %s's spool volume before ENOSPC", n>>20, b.name)
	time.Sleep(30 * time.Second)
	m, err := scrape("http://" + b.metrics + "/metrics")
	dropped := sum(m, "spikehunt_export_records_total", `outcome="dropped"`)
	s.log.printf("spool-disk-full: %s counted %.0f export requests dropped (spikehunt_export_errors_total{reason=\"spool\"} %.0f)", b.name, dropped, sum(m, "spikehunt_export_errors_total", `reason="spool"`))
	if err == nil && dropped == 0 {
		err = errors.New("the agent counted no drop while its spool volume was full: no alertable state")
	}
	s.log.printf("spool-disk-full: %s's counters rows stored since the volume filled (the dashboard's \"Agents reporting counters\" leaves it out at 0): %s",
		b.name, s.query(fmt.Sprintf("SELECT count() FROM counters WHERE host = '%s' AND metric = 'spikehunt.agent.spool.bytes' AND ts_start > toDateTime64('%s', 6, 'UTC')",
			b.name, t0.Add(5*time.Second).UTC().Format("2006-01-02 15:04:05.000000"))))
	if skip {
		return errors.Join(err, s.flowingAgain(b, time.Now()))
	}
	if rerr := os.Remove(fill); rerr != nil || err != nil {
		return errors.Join(err, rerr)
	}
	t1 := time.Now()
	// Requests sent while the volume was full, and for the agent's batch
	// delay after it, may have been dropped on purpose.
	lo, hi := b.idsIn(t0.Add(-2*time.Second), t1.Add(2*time.Second))
	s.mu.Lock()
	s.accounted = append(s.accounted, accounted{a: b, lo: lo, hi: hi, why: "dropped by soak-b's full spool volume", counted: dropped})
	s.mu.Unlock()
	return s.flowingAgain(b, t1.Add(3*time.Second))
}

// flowingAgain waits for a's requests sent after from to be stored.
func (s *soak) flowingAgain(a *agent, from time.Time) error {
	return s.flowing(a.name, from)
}

// clock-step: soak-a's wall clock steps two hours ahead (past the
// ingest's --accept.max-ahead of 1 h) for 30 s, then back, as NTP would
// step it. The ingest refuses the rows stamped in the future, counts them
// (spikehunt_ingest_rows_refused_total{reason="timestamp"}) and
// dead-letters their messages; those requests are accounted as refused.
// Once the clock is right its rows land again.
func (s *soak) clockStep(skip bool) error {
	a := s.agents[0]
	before, err := scrape("http://" + s.ingestAddr + "/metrics")
	if err != nil {
		return err
	}
	if err := os.WriteFile(a.clockFile, []byte("2h\n"), 0o644); err != nil {
		return err
	}
	t0 := time.Now()
	s.log.printf("clock-step: %s's clock stepped 2 h ahead", a.name)
	time.Sleep(30 * time.Second)
	if !skip {
		if err := os.WriteFile(a.clockFile, []byte("0s\n"), 0o644); err != nil {
			return err
		}
		s.log.printf("clock-step: %s's clock stepped back", a.name)
	}
	t1 := time.Now()
	err = s.flowing(a.name, t1.Add(3*time.Second))
	after, serr := scrape("http://" + s.ingestAddr + "/metrics")
	if serr != nil {
		return serr
	}
	refused := sum(after, "spikehunt_ingest_rows_refused_total", `table="requests"`, `reason="timestamp"`) -
		sum(before, "spikehunt_ingest_rows_refused_total", `table="requests"`, `reason="timestamp"`)
	s.log.printf("clock-step: the ingest refused %.0f requests rows for their time (spikehunt_ingest_rows_refused_total{reason=\"timestamp\"})", refused)
	lo, hi := a.idsIn(t0.Add(-2*time.Second), t1.Add(2*time.Second))
	s.mu.Lock()
	s.accounted = append(s.accounted, accounted{a: a, lo: lo, hi: hi, why: "refused by the ingest for soak-a's stepped clock", counted: refused})
	s.mu.Unlock()
	return err
}

// ---- The end: drain, count, measure.

func (s *soak) finish(t *testing.T, began, end time.Time) {
	ctx := context.Background()
	sentA, errA := s.agents[0].stop()
	sentB, errB := s.agents[1].stop()
	if err := errors.Join(errA, errB, s.fleet.stop()); err != nil {
		t.Errorf("the load: %v", err)
	}
	kept := s.fleet.kept.Load()
	s.log.printf("soak: load stopped: soak-a sent %d, soak-b %d, the fleet %d spans and %d counter points in %d minutes (slowest minute made in %.1f s)",
		sentA, sentB, kept, s.fleet.points.Load(), s.fleet.windows.Load(), time.Duration(s.fleet.slowest.Load()).Seconds())

	// Drain: until every agent request and fleet span is in, or the
	// counts stop moving for a minute.
	var rows, unique int64
	var last int64 = -1
	lastMove := time.Now()
	for deadline := time.Now().Add(drainLimit); time.Now().Before(deadline); time.Sleep(5 * time.Second) {
		tab, err := store.Select(ctx, s.st, "SELECT count(), uniqExact(trace_id) FROM requests")
		if err != nil {
			// A store that does not answer counts as a count that does
			// not move.
			if time.Since(lastMove) > time.Minute {
				break
			}
			continue
		}
		fmt.Sscan(tab.Rows[0][0], &rows)
		fmt.Sscan(tab.Rows[0][1], &unique)
		if rows != last {
			last, lastMove = rows, time.Now()
		}
		// Past the expected count, the count must also have settled: the
		// refused ranges are wider than what was refused, so the count
		// can pass it with rows still on their way.
		if unique >= sentA+sentB+kept-s.maxRefused() && time.Since(lastMove) > 10*time.Second || time.Since(lastMove) > time.Minute {
			break
		}
	}
	time.Sleep(3 * time.Second) // a late duplicate comes with the same batches
	lost, dup := s.countLoss(t, sentA, sentB, kept)

	fmt.Printf("BENCH soak.minutes %.1f\n", end.Sub(began).Minutes())
	fmt.Printf("BENCH soak.fleet_hosts %d\n", s.fleet.cfg.Hosts)
	secs := end.Sub(began).Seconds()
	fmt.Printf("BENCH soak.requests_per_s %.0f\n", float64(sentA+sentB+kept)/secs)
	fmt.Printf("BENCH soak.metric_points_per_s %.0f\n", float64(s.fleet.points.Load())/secs)
	fmt.Printf("BENCH soak.lost_rows %d\n", lost)
	fmt.Printf("BENCH soak.duplicate_rows %d\n", dup)
	if lost != 0 {
		t.Errorf("soak.lost_rows %d, want 0", lost)
	}
	if dup != 0 {
		t.Errorf("soak.duplicate_rows %d, want 0", dup)
	}
	s.drift(t, began, end)
	s.detectLag(t)
}

func (s *soak) maxRefused() int64 {
	var n int64
	for _, ac := range s.accounted {
		if ac.lo > 0 {
			n += ac.hi - ac.lo + 1
		}
	}
	return n
}

// countLoss counts, per source, what the store lacks and holds twice.
// An agent's missing request is lost unless it falls in a range a fault
// refused on purpose with a counted reason; the fleet's are lost all.
func (s *soak) countLoss(t *testing.T, sentA, sentB, kept int64) (lost, dup int64) {
	ctx := context.Background()
	for i, a := range s.agents {
		sent := []int64{sentA, sentB}[i]
		n, u, err := s.countIDs(ctx, a, 1, sent)
		if err != nil {
			t.Fatal(err)
		}
		dup += n - u
		missing := sent - u
		for _, ac := range s.accounted {
			if ac.a != a || ac.lo <= 0 {
				continue
			}
			_, uin, err := s.countIDs(ctx, a, ac.lo, ac.hi)
			if err != nil {
				t.Fatal(err)
			}
			miss := ac.hi - ac.lo + 1 - uin
			s.log.printf("accounting: %s: %d of its requests %d…%d missing: %s (its counter: %.0f)", a.name, miss, ac.lo, ac.hi, ac.why, ac.counted)
			if miss > 0 && ac.counted == 0 {
				continue // not counted by anyone: lost
			}
			missing -= miss
		}
		s.log.printf("accounting: %s sent %d requests, stored %d rows, %d distinct; lost %d", a.name, sent, n, u, missing)
		lost += missing
	}
	tab, err := store.Select(ctx, s.st, "SELECT count(), uniqExact(trace_id) FROM requests WHERE startsWith(host, 'node-')")
	if err != nil {
		t.Fatal(err)
	}
	var n, u int64
	fmt.Sscan(tab.Rows[0][0], &n)
	fmt.Sscan(tab.Rows[0][1], &u)
	s.log.printf("accounting: the fleet sent %d spans, stored %d rows, %d distinct; lost %d", kept, n, u, kept-u)
	return lost + (kept - u), dup + (n - u)
}

// countIDs counts a's requests lo…hi in the store: rows, distinct ids.
func (s *soak) countIDs(ctx context.Context, a *agent, lo, hi int64) (rows, unique int64, err error) {
	q := fmt.Sprintf("SELECT count(), uniqExact(trace_id) FROM requests WHERE host = '%s' AND lower(hex(trace_id)) BETWEEN '%s' AND '%s'", a.name, a.traceID(lo), a.traceID(hi))
	tab, err := store.Select(ctx, s.st, q)
	if err != nil {
		return 0, 0, fmt.Errorf("count %s's requests: %w", a.name, err)
	}
	fmt.Sscan(tab.Rows[0][0], &rows)
	_, err = fmt.Sscan(tab.Rows[0][1], &unique)
	return rows, unique, err
}

// drift is each component's RSS drift over the last two thirds: the mean
// of the last third against the mean of the middle third, in percent.
func (s *soak) drift(t *testing.T, began, end time.Time) {
	third := end.Sub(began) / 3
	mid, last := map[string][]float64{}, map[string][]float64{}
	heapMid, heapLast := map[string][]float64{}, map[string][]float64{}
	// into files a sample's readings (0: none) under the middle or the
	// last third; the first third is left out.
	into := func(at time.Time, vals map[string]int64, mid, last map[string][]float64) {
		for name, v := range vals {
			switch {
			case v == 0:
			case at.After(began.Add(2 * third)):
				last[name] = append(last[name], float64(v))
			case at.After(began.Add(third)):
				mid[name] = append(mid[name], float64(v))
			}
		}
	}
	for _, smp := range s.samples {
		into(smp.at, smp.rss, mid, last)
		into(smp.at, smp.heapGoal, heapMid, heapLast)
	}
	names := make([]string, 0, len(mid))
	for n := range mid {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if len(last[n]) == 0 {
			t.Errorf("no RSS sample of %s in the last third", n)
			continue
		}
		m, l := mean(mid[n]), mean(last[n])
		pct := (l - m) / m * 100
		fmt.Printf("BENCH soak.rss_drift_pct_%s %.1f\n", n, pct)
		s.log.printf("rss: %s: middle third %.0f MiB, last third %.0f MiB", n, m/1024, l/1024)
		if len(heapMid[n]) > 0 && len(heapLast[n]) > 0 {
			// What the Go heap holds, without the runtime's freed pages
			// not yet handed back: a drift in RSS that this does not
			// share is the runtime's, not a leak.
			hm, hl := mean(heapMid[n]), mean(heapLast[n])
			s.log.printf("rss: %s: its GC's heap goal: middle third %.0f MiB, last third %.0f MiB (%+.1f%%)", n, hm/(1<<20), hl/(1<<20), (hl-hm)/hm*100)
		}
		if pct > maxDriftPct {
			t.Errorf("soak.rss_drift_pct_%s %.1f, want ≤ %d", n, pct, maxDriftPct)
		}
	}
}

func mean(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// detectLag is the largest lag of the detector sampled outside the
// faults: a fault's window runs from its start until its recovery was
// seen, and on for two detect intervals (the pass in flight and the one
// that catches up). Samples before the detector's first pass, when it
// has none to be behind of, do not count.
func (s *soak) detectLag(t *testing.T) {
	worst, n := 0.0, 0
	var at time.Time
	for _, smp := range s.samples {
		if smp.detectLag < 0 {
			continue
		}
		if slices.ContainsFunc(s.windows, func(w window) bool {
			return !smp.at.Before(w.from) && smp.at.Before(w.to.Add(2*detectEvery))
		}) {
			continue
		}
		n++
		if smp.detectLag > worst {
			worst, at = smp.detectLag, smp.at
		}
	}
	fmt.Printf("BENCH soak.detect_lag_max_s %.1f\n", worst)
	s.log.printf("detect lag: %d samples outside the faults, the largest %.1f s at %s", n, worst, at.UTC().Format(time.TimeOnly))
	if n == 0 {
		t.Error("no sample of the detector's lag outside the faults")
	}
	if worst > maxDetectLag.Seconds() || math.IsNaN(worst) {
		t.Errorf("soak.detect_lag_max_s %.1f, want ≤ %.0f (two detect intervals)", worst, maxDetectLag.Seconds())
	}
}
