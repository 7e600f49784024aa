package sim

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// Requests are simulated one by one but emitted as the agent would keep
// them (docs/design.md §3): a request above the host's rolling p99 is always
// kept with weight 1; the rest are kept 1 in SampleEvery with weight
// SampleEvery. Only kept requests get a latency drawn in full, which keeps
// a 300-host, 6-hour fleet (~200 million requests) to seconds of CPU.

// p99Z is the standard normal's 99th percentile: the agent's rolling p99
// of a lognormal body sits at median × exp(σ × p99Z).
const p99Z = 2.3263478740408408

// endpoint is one route of the simulated service. IO-doing requests wait
// for the disk in an io-stall; the others do not.
type endpoint struct {
	name   string
	share  float64 // cumulative share of requests
	median float64 // × the service's median
	io     bool
}

var endpoints = []endpoint{
	{"/v1/cart", 0.40, 1, false},
	{"/v1/items", 0.75, 0.8, false},
	{"/v1/orders/save", 1, 2, true},
}

// storefront is endpoint-stall's service: four routes, a quarter of the
// requests each; the first is the one whose dependency stalls.
var storefront = []endpoint{
	{"/checkout", 0.25, 1.5, false},
	{"/search", 0.50, 1, false},
	{"/feed", 0.75, 0.8, false},
	{"/profile", 1, 1, false},
}

// endpointsOf is the routes of a scenario's service.
func endpointsOf(scenario string) []endpoint {
	if scenario == EndpointStall {
		return storefront
	}
	return endpoints
}

func pickEndpoint(eps []endpoint, u float64) *endpoint {
	for i := range eps {
		if u < eps[i].share {
			return &eps[i]
		}
	}
	return &eps[len(eps)-1]
}

// requestGen draws one host's requests second by second.
type requestGen struct {
	cfg     Config
	eps     []endpoint // the service's routes (endpointsOf)
	host    *Host
	rng     *rand.Rand
	next    int // index of the first stall not yet over
	threads uint32
}

// load is the diurnal swing: ±30% over a day, lowest at 04:00 UTC.
func load(t time.Time) float64 {
	day := float64(t.Unix()%86400) / 86400
	return 1 + 0.3*math.Sin(2*math.Pi*(day-10.0/24))
}

// median is the body's median latency at t: constant, or rising linearly
// to Creep × at the end for slow-creep.
func (g *requestGen) median(t time.Time) float64 {
	m := g.cfg.MedianUS
	if g.cfg.Creep > 1 {
		m *= 1 + (g.cfg.Creep-1)*float64(t.Sub(g.cfg.Start))/float64(g.cfg.Duration)
	}
	return m
}

// second appends the kept requests that arrive in [sec, sec+1s) to out.
func (g *requestGen) second(sec time.Time, out []telemetry.Request) []telemetry.Request {
	for g.next < len(g.host.Stalls) && !g.host.Stalls[g.next].End().After(sec) {
		g.next++
	}
	// A stall that touches this second (requests in flight up to 10 ms
	// before it are caught too).
	var stall *Stall
	if g.next < len(g.host.Stalls) {
		s := &g.host.Stalls[g.next]
		if s.Start.Add(-10 * time.Millisecond).Before(sec.Add(time.Second)) {
			stall = s
		}
	}
	lambda := g.cfg.RPS * load(sec)
	n := int(lambda)
	if g.rng.Float64() < lambda-float64(n) {
		n++
	}
	med := g.median(sec)
	slowUS := med * math.Exp(g.cfg.Sigma*p99Z)
	missSlowUS := g.cfg.MissFactor * med * math.Exp(g.cfg.Sigma*missP99Z(g.cfg.MissShare))
	keepBelow := 0.99 / float64(g.cfg.SampleEvery)
	for i := 0; i < n; i++ {
		u := g.rng.Float64()
		var (
			at      time.Time
			ep      *endpoint
			us      float64
			weight  uint32
			decided bool
		)
		if stall != nil {
			at = sec.Add(time.Duration(g.rng.Float64() * float64(time.Second)))
			ep = pickEndpoint(g.eps, g.rng.Float64())
			if wait, hit := stallWait(stall, at, ep, g.rng); hit {
				us = med*ep.median*math.Exp(g.cfg.Sigma*bodyNormal(g.rng)) + float64(wait/time.Microsecond)
				weight, decided = 1, true
			}
		}
		if !decided && g.cfg.MissShare > 0 && g.rng.Float64() < g.cfg.MissShare {
			// A cache miss: the second mode. The agent's rolling p99 lies
			// in this mode (its p90 with a tenth missing); above it a
			// miss is kept with weight 1, below it sampled as the hits.
			us = g.cfg.MissFactor * med * math.Exp(g.cfg.Sigma*g.rng.NormFloat64())
			switch {
			case us > missSlowUS:
				weight = 1
			case g.rng.Float64() < 1/float64(g.cfg.SampleEvery):
				weight = uint32(g.cfg.SampleEvery)
			default:
				continue
			}
			decided = true
			ep = pickEndpoint(g.eps, g.rng.Float64())
			at = sec.Add(time.Duration(g.rng.Float64() * float64(time.Second)))
			us *= ep.median
		}
		if !decided {
			switch {
			case u < 0.01: // the tail above the rolling p99: always kept
				us, weight = med*math.Exp(g.cfg.Sigma*tailNormal(g.rng, p99Z)), 1
			case u < 0.012: // a GC pause of 1–6 ms on top of the body
				us = med*math.Exp(g.cfg.Sigma*bodyNormal(g.rng)) + 1000 + 5000*g.rng.Float64()
				if us > slowUS {
					weight = 1
				} else if g.rng.Float64() < 1/float64(g.cfg.SampleEvery) {
					weight = uint32(g.cfg.SampleEvery)
				} else {
					continue
				}
			case u-0.012 < keepBelow:
				us, weight = med*math.Exp(g.cfg.Sigma*bodyNormal(g.rng)), uint32(g.cfg.SampleEvery)
			default:
				continue // served, not kept
			}
			if ep == nil {
				ep = pickEndpoint(g.eps, g.rng.Float64())
				at = sec.Add(time.Duration(g.rng.Float64() * float64(time.Second)))
			}
			us *= ep.median
		}
		r := telemetry.Request{
			Service: g.cfg.Service, Endpoint: ep.name, Start: at,
			Duration: time.Duration(us) * time.Microsecond, Status: "200",
			ThreadID: 1000 + uint32(g.rng.IntN(32)), Weight: weight,
		}
		if g.rng.IntN(1000) == 0 {
			r.Status = "500"
		}
		a, b := g.rng.Uint64(), g.rng.Uint64()
		for k := 0; k < 8; k++ {
			r.TraceID[k], r.TraceID[8+k] = byte(a>>(8*k)), byte(b>>(8*k))
		}
		c := g.rng.Uint64() | 1
		for k := 0; k < 8; k++ {
			r.SpanID[k] = byte(c >> (8 * k))
		}
		out = append(out, r)
	}
	return out
}

// stallWait is how long a request arriving at at waits because of s:
//   - none (a library sleeps holding a lock) and disk (for IO-doing
//     requests): until the stall ends; a stall of one endpoint's
//     dependency holds only that endpoint's requests;
//   - NIC softirq or a down interface's burst: softirq work starves the
//     request's CPU for a part of the remaining stall.
func stallWait(s *Stall, at time.Time, ep *endpoint, rng *rand.Rand) (time.Duration, bool) {
	if at.Before(s.Start.Add(-10*time.Millisecond)) || !at.Before(s.End()) {
		return 0, false
	}
	if s.Endpoint != "" && s.Endpoint != ep.name {
		return 0, false
	}
	left := s.End().Sub(at)
	if at.Before(s.Start) {
		left = s.Length
	}
	switch s.Cause {
	case CauseDisk:
		if !ep.io {
			return 0, false
		}
		return left, true
	case CauseNICSoftirq, CauseDownIface:
		return time.Duration((0.25 + 0.5*rng.Float64()) * float64(left)), true
	}
	return left, true
}

// missP99Z is the standard normal quantile, within the misses' mode, of
// the whole body's p99: the misses' 1 − 0.01 / share quantile (share ≥
// 0.01; with fewer misses, their median).
func missP99Z(share float64) float64 {
	if share <= 0.01 {
		return 0
	}
	return math.Sqrt2 * math.Erfinv(1-2*0.01/share)
}

// bodyNormal draws a standard normal below the p99 (rejection: 99% accept).
func bodyNormal(rng *rand.Rand) float64 {
	for {
		if z := rng.NormFloat64(); z < p99Z {
			return z
		}
	}
}

// tailNormal draws a standard normal conditioned on z > a, by Marsaglia's
// tail method: x = sqrt(a² − 2 ln U1), accepted when U2·x < a.
func tailNormal(rng *rand.Rand, a float64) float64 {
	for {
		x := math.Sqrt(a*a - 2*math.Log(1-rng.Float64()))
		if rng.Float64()*x < a {
			return x
		}
	}
}
