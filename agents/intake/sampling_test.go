package intake

import (
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/tests/fakeclock"
)

// sendLines writes lines over a connected socket, perDatagram at a time.
// Unix datagram sends block while the receiver is behind, so nothing is
// lost in the kernel.
func sendLines(t testing.TB, network, addr string, lines []string, perDatagram int) {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < len(lines); i += perDatagram {
		j := min(i+perDatagram, len(lines))
		if _, err := c.Write([]byte(strings.Join(lines[i:j], "\n"))); err != nil {
			t.Fatal(err)
		}
	}
}

// drain reads Out in the background; stop returns what it read once the
// source has classified want requests and the queue is empty.
func drain(t testing.TB, in *Intake, source string, want int) (stop func() []telemetry.Request) {
	got := make(chan telemetry.Request, 1<<20)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for r := range in.Out() {
			got <- r
		}
	}()
	return func() []telemetry.Request {
		waitFor(t, 20*time.Second, fmt.Sprintf("%d requests from %s", want, source), func() bool {
			return received(in, source) >= float64(want) && len(in.Out()) == 0
		})
		time.Sleep(20 * time.Millisecond) // let the reader move the last one
		var rs []telemetry.Request
		for {
			select {
			case r := <-got:
				rs = append(rs, r)
			default:
				return rs
			}
		}
	}
}

func unixOnly(t testing.TB) Config {
	cfg := testConfig(t)
	cfg.OTLPGRPC, cfg.OTLPHTTP, cfg.LineUDP = "", "", ""
	return cfg
}

func TestSamplingKeepsSlowAndWeightsTheRest(t *testing.T) {
	cfg := unixOnly(t)
	cfg.SampleEvery = 10
	cfg.SampledPerSecond = -1 // a fixed rate, however fast the lines come
	cfg.SlowThreshold = 100 * time.Millisecond
	cfg.TailQuantile = -1 // only the fixed threshold, so "slow" is known up front
	cfg.QueueSize = 1 << 16
	in := startIntake(t, cfg)

	const n = 20000
	rng := rand.New(rand.NewPCG(1, 2))
	var lines []string
	var slow int
	var trueSum time.Duration
	for range n {
		us := 1000 + rng.IntN(49000)
		if rng.IntN(50) == 0 {
			us = 100_000 + rng.IntN(900_000)
			slow++
		}
		trueSum += time.Duration(us) * time.Microsecond
		var id [16]byte
		for i := range id {
			id[i] = byte(rng.Uint32())
		}
		lines = append(lines, fmt.Sprintf("billy /search %d 200 %s", us, hex.EncodeToString(id[:])))
	}
	stop := drain(t, in, SourceUnixgram, n)
	sendLines(t, "unixgram", in.Addrs().LineUnix, lines, 100)
	kept := stop()

	var keptSlow, keptSampled int
	var weights float64
	var weightedSum time.Duration
	for _, r := range kept {
		switch {
		case r.Duration >= cfg.SlowThreshold && r.Weight != 1:
			t.Fatalf("slow request %+v has weight %d, want 1", r, r.Weight)
		case r.Duration >= cfg.SlowThreshold:
			keptSlow++
		case r.Weight != 10:
			t.Fatalf("sampled request %+v has weight %d, want 10", r, r.Weight)
		default:
			keptSampled++
		}
		weights += float64(r.Weight)
		weightedSum += time.Duration(r.Weight) * r.Duration
	}
	if keptSlow != slow {
		t.Errorf("kept %d slow requests, want all %d", keptSlow, slow)
	}
	// Binomial(n−slow, 0.1): σ ≈ 42; allow 5σ.
	if want := float64(n-slow) / 10; math.Abs(float64(keptSampled)-want) > 5*math.Sqrt(want*0.9) {
		t.Errorf("kept %d of %d fast requests, want about %.0f", keptSampled, n-slow, want)
	}
	if math.Abs(weights-n)/n > 0.05 {
		t.Errorf("sum of weights = %.0f, want %d ± 5%%", weights, n)
	}
	if got, want := weightedSum.Seconds()/weights, trueSum.Seconds()/n; math.Abs(got-want)/want > 0.05 {
		t.Errorf("weighted mean latency = %.4fs, want %.4fs ± 5%%", got, want)
	}
	if got := outcomes(in, SourceUnixgram, "kept_slow"); got != float64(slow) {
		t.Errorf("requests_total{outcome=kept_slow} = %v, want %d", got, slow)
	}
	if got := outcomes(in, SourceUnixgram, "sampled_out"); got != float64(n-slow-keptSampled) {
		t.Errorf("requests_total{outcome=sampled_out} = %v, want %d", got, n-slow-keptSampled)
	}
}

func TestKeepTraceIsDeterministicAndEven(t *testing.T) {
	const n, every = 100000, 10
	var byID, byCounter int
	for i := 1; i <= n; i++ {
		var id [16]byte
		// Sequential ids, as a careless app would make them: the hash
		// must still sample evenly.
		id[15], id[14], id[13] = byte(i), byte(i>>8), byte(i>>16)
		if keepTrace(id, every) {
			byID++
		}
		if keepTrace(id, every) != keepTrace(id, every) {
			t.Fatalf("keepTrace(%x) is not deterministic", id)
		}
		if keepTrace([16]byte{}, every) {
			byCounter++
		}
	}
	for name, got := range map[string]int{"sequential trace ids": byID, "no trace id": byCounter} {
		if want := n / every; math.Abs(float64(got-want)) > 5*math.Sqrt(float64(want)*0.9) {
			t.Errorf("%s: kept %d of %d, want about %d", name, got, n, want)
		}
	}
	if !keepTrace([16]byte{9}, 1) {
		t.Error("keepTrace with every = 1 dropped a request")
	}
}

func TestRollingTailKeepsTheTail(t *testing.T) {
	cfg := unixOnly(t)
	cfg.SampleEvery = 100
	cfg.SlowThreshold = -1 // no fixed threshold: only the rolling p99
	cfg.QueueSize = 1 << 16
	clock := fakeclock.NewStepping(t0, 10*time.Millisecond) // one datagram per 10 ms
	in := startIntake(t, cfg, func(in *Intake) { in.now = clock.Now })

	rng := rand.New(rand.NewPCG(5, 6))
	var lines []string
	const warm, n = 3000, 8000
	outliers := 0
	for i := range n {
		if i >= warm && i%200 == 0 {
			lines = append(lines, "billy /slow 80000 200")
			outliers++
			continue
		}
		lines = append(lines, fmt.Sprintf("billy /fast %d 200", 1000+rng.IntN(9000)))
	}
	stop := drain(t, in, SourceUnixgram, n)
	sendLines(t, "unixgram", in.Addrs().LineUnix, lines, 10)
	kept := stop()

	var slowKept, fastAsSlow int
	for _, r := range kept {
		switch {
		case r.Endpoint == "/slow" && r.Weight == 1:
			slowKept++
		case r.Endpoint == "/fast" && r.Weight == 1:
			fastAsSlow++
		}
	}
	if slowKept != outliers {
		t.Errorf("kept %d of %d outliers at 80 ms with weight 1, want all (no fixed threshold: the rolling p99 must catch them)", slowKept, outliers)
	}
	// Uniform 1–10 ms: the p99 bucket's upper edge (10.24 ms) is above
	// every fast request, so none of them is "slow" once warm.
	if fastAsSlow > warm/100 {
		t.Errorf("%d fast requests kept as slow, want at most %d (the warm-up)", fastAsSlow, warm/100)
	}
}

func TestCardinalityOverflow(t *testing.T) {
	cfg := unixOnly(t)
	cfg.MaxServices, cfg.MaxEndpoints = 2, 3
	cfg.CardinalityIdle = time.Minute
	clock := fakeclock.NewStepping(t0, time.Millisecond)
	in := startIntake(t, cfg, func(in *Intake) { in.now = clock.Now })
	addr := in.Addrs().LineUnix

	names := func(rs []telemetry.Request) []string {
		var s []string
		for _, r := range rs {
			s = append(s, r.Service+" "+r.Endpoint)
		}
		return s
	}
	sendDatagram(t, "unixgram", addr, []byte("a /1 1 200\na /2 1 200\na /3 1 200\na /4 1 200\na /5 1 200\nb /1 1 200\nc /1 1 200\nc /2 1 200\na /1 1 200"))
	want := []string{"a /1", "a /2", "a /3", "a _overflow", "a _overflow", "b /1", "_overflow _overflow", "_overflow _overflow", "a /1"}
	if diff := cmp.Diff(want, names(collect(t, in, len(want), 5*time.Second))); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for kind, n := range map[string]float64{"service": 2, "endpoint": 2} {
		if got := testutilOverflow(in, kind); got != n {
			t.Errorf("overflow_total{kind=%s} = %v, want %v", kind, got, n)
		}
	}

	// Two minutes later only b is busy: a's slot goes to c.
	clock.Advance(2 * time.Minute)
	sendDatagram(t, "unixgram", addr, []byte("b /1 1 200\nc /1 1 200"))
	want = []string{"b /1", "c /1"}
	if diff := cmp.Diff(want, names(collect(t, in, len(want), 5*time.Second))); diff != "" {
		t.Errorf("after a went idle (-want +got):\n%s", diff)
	}
}

// A service far busier than SampleEvery × SampledPerSecond is sampled more
// thinly from its second second on, with weights that still add up to its
// traffic; a quiet service next to it keeps the base rate.
func TestSampledPerSecondBoundsABusyService(t *testing.T) {
	cfg := unixOnly(t)
	cfg.SampleEvery, cfg.SampledPerSecond = 10, 100
	cfg.SlowThreshold, cfg.TailQuantile = -1, -1 // nothing is slow: only the coin keeps
	cfg.QueueSize = 1 << 16
	// 101 lines a datagram, a datagram every 5 ms: busy at 20,000
	// requests/s, quiet at 200.
	start := time.Unix(t0.Unix(), 0)
	clock := fakeclock.NewStepping(start.Add(-5*time.Millisecond), 5*time.Millisecond)
	in := startIntake(t, cfg, func(in *Intake) { in.now = clock.Now })

	const seconds, perSecond = 4, 200
	rng := rand.New(rand.NewPCG(7, 8))
	var lines []string
	for range seconds * perSecond {
		for range 100 {
			lines = append(lines, fmt.Sprintf("busy /a 1000 200 %016x%016x", rng.Uint64(), rng.Uint64()))
		}
		lines = append(lines, fmt.Sprintf("quiet /b 1000 200 %016x%016x", rng.Uint64(), rng.Uint64()))
	}
	stop := drain(t, in, SourceUnixgram, len(lines))
	sendLines(t, "unixgram", in.Addrs().LineUnix, lines, 101)
	kept := stop()

	type key struct {
		svc string
		sec int64
	}
	count, weights := map[key]int{}, map[key]int{}
	for _, r := range kept {
		k := key{r.Service, int64(r.Start.Add(r.Duration).Sub(start) / time.Second)}
		count[k]++
		weights[k] += int(r.Weight)
		if r.Service == "quiet" && r.Weight != 10 {
			t.Fatalf("quiet request kept with weight %d, want the base 10", r.Weight)
		}
		if r.Service == "busy" && k.sec > 0 && r.Weight != 320 {
			// 20,000 a second needs N ≥ 200 for 100 a second: 10 × 2^5.
			t.Fatalf("busy request in second %d kept with weight %d, want 320", k.sec, r.Weight)
		}
	}
	if n := count[key{"busy", 0}]; n < 1600 || n > 2400 {
		t.Errorf("busy kept %d in its first second, want about 2000 (no second before it to go by)", n)
	}
	total := 0
	for sec := int64(1); sec < seconds; sec++ {
		n := count[key{"busy", sec}]
		if n < 30 || n > 110 {
			t.Errorf("busy kept %d in second %d, want about 62 (at most about SampledPerSecond)", n, sec)
		}
		total += weights[key{"busy", sec}]
	}
	if want := 20000 * (seconds - 1); total < want*75/100 || total > want*125/100 {
		t.Errorf("busy weights add up to %d over %d s, want about %d: sampling is biased", total, seconds-1, want)
	}
}

// Rates are SampleEvery times powers of two, so a trace kept at a low rate
// is kept at every higher one.
func TestThinnerRatesKeepSubsetsOfTraces(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for range 100000 {
		var id [16]byte
		for i := range id {
			id[i] = byte(rng.Uint32())
		}
		for shift := range maxRateShift {
			if keepTrace(id, 10<<(shift+1)) && !keepTrace(id, 10<<shift) {
				t.Fatalf("trace %x kept at 1 in %d but not at 1 in %d", id, 10<<(shift+1), 10<<shift)
			}
		}
	}
}

func TestDividesIsTheRemainderTest(t *testing.T) {
	ds := []uint32{1, 2, 3, 5, 7, 10, 16, 20, 80, 1000, 10 << 12, 1_000_000 << 12, 1<<32 - 1, 1 << 31}
	r := rand.New(rand.NewPCG(1, 2))
	for _, d := range ds {
		for range 20000 {
			h := r.Uint64()
			if r.IntN(2) == 0 {
				h -= h % uint64(d) // a multiple, which random h rarely is
			}
			if got, want := divides(d, h), h%uint64(d) == 0; got != want {
				t.Fatalf("divides(%d, %d) = %v, want %v", d, h, got, want)
			}
		}
	}
}
