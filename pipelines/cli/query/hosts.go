package query

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
)

// Host is one host of one service over the range, as `spikehunt hosts`
// shows it. The JSON keys are part of the CLI's interface.
type Host struct {
	Service   string     `json:"service"`
	Host      string     `json:"host"`
	HWClass   string     `json:"hw_class"`
	Requests  uint64     `json:"requests"` // sum of sampling weights: requests served
	P50MS     float64    `json:"p50_ms"`
	P99MS     float64    `json:"p99_ms"`
	MaxMS     float64    `json:"max_ms"`
	Spikes    int        `json:"spikes"`
	LastSpike *time.Time `json:"last_spike"` // null without spikes
}

// Hosts is `spikehunt hosts`.
func Hosts(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return hostsCommand.run(ctx, args, stdout, stderr)
}

var hostsCommand = command{
	name:     "hosts",
	synopsis: "Lists each host's latency (requests, p50, p99, max from latency_1s) and spike\nwindows over the range, most spikes first, and how many hosts had any: one bad\nmachine, or the whole fleet?",
	rows:     "a second of latency_1s is [ts, ts + 1 s), and a spike window\n[window_start, window_end)",
	columns:  hostsColumns,
	setup: func(*flag.FlagSet) query {
		return query{load: func(ctx context.Context, st store.Store, s Scope) (answer, error) {
			hosts, err := LoadHosts(ctx, st, s)
			if err != nil {
				return answer{}, err
			}
			// The limit is of the rows shown; the summary counts every host.
			shown := hosts
			if s.limit > 0 && len(shown) > s.limit {
				shown = shown[:s.limit]
			}
			return answerOf(shown, s.none("hosts"), func(w io.Writer) error {
				return printHosts(w, hosts, shown, s.Service == "")
			}).withSummary(func() (Summary, error) {
				sum := s.summary(len(hosts), len(shown), hostLines(hosts, shown, s.Service == "")...)
				sum.Services = ServiceSummaries(hosts)
				return sum, nil
			}), nil
		}}
	},
}

func printHosts(w io.Writer, hosts, shown []Host, withService bool) error {
	tw := newTable(w)
	header := "HOST\tHW_CLASS\tREQUESTS\tP50_MS\tP99_MS\tMAX_MS\tSPIKES\tLAST_SPIKE (UTC)"
	if withService {
		header = "SERVICE\t" + header
	}
	fmt.Fprintln(tw, header)
	for _, h := range shown {
		if withService {
			fmt.Fprintf(tw, "%s\t", h.Service)
		}
		last := "-"
		if h.LastSpike != nil {
			last = utcTime(*h.LastSpike)
		}
		lat := func(v float64) string {
			if h.Requests == 0 {
				return "-"
			}
			return ms(v * 1000)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\n", h.Host, orDash(h.HWClass), h.Requests,
			lat(h.P50MS), lat(h.P99MS), lat(h.MaxMS), h.Spikes, last)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, line := range hostLines(hosts, shown, withService) {
		fmt.Fprintln(w, line)
	}
	return nil
}

// hostLines are the lines under the hosts table.
func hostLines(hosts, shown []Host, withService bool) []string {
	var lines []string
	if len(shown) < len(hosts) {
		lines = append(lines, fmt.Sprintf("showing %d of %d hosts (--limit); the summary counts all of them", len(shown), len(hosts)))
	}
	return append(lines, HostSummaries(hosts, withService)...)
}

// LoadHosts joins each host's latency from latency_1s with its spike
// windows in the scope, sorted by spike count, then worst max latency.
func LoadHosts(ctx context.Context, st store.Store, s Scope) ([]Host, error) {
	latency, err := readRows(ctx, st, "latency_1s", `SELECT service, host, any(hw_class) AS hw_class,
		sum(weighted_count) AS requests,
		quantilesTDigestWeightedMerge(0.5, 0.99)(quantiles_us) AS q, q[1] AS p50_us, q[2] AS p99_us,
		max(max_us) AS peak_us
	FROM latency_1s WHERE `+s.Filter(Where{}, Second).String()+`
	GROUP BY service, host`, func(c *columns) func(int) Host {
		service, host, hwClass := col[string](c, "service"), col[string](c, "host"), col[string](c, "hw_class")
		requests := col[uint64](c, "requests")
		p50, p99 := col[float32](c, "p50_us"), col[float32](c, "p99_us")
		peak := col[uint32](c, "peak_us")
		return func(i int) Host {
			return Host{Service: service.Row(i), Host: host.Row(i), HWClass: hwClass.Row(i), Requests: requests.Row(i),
				P50MS: float32Decimal(p50.Row(i)) / 1000, P99MS: float32Decimal(p99.Row(i)) / 1000,
				MaxMS: float64(peak.Row(i)) / 1000}
		}
	})
	if err != nil {
		return nil, err
	}
	type hostSpikes struct {
		service, host, hwClass string
		n                      int
		last                   time.Time
	}
	spikes, err := readRows(ctx, st, "spikes", `SELECT service, host, any(hw_class) AS hw_class, count() AS n,
		max(window_start) AS last
	FROM spikes FINAL WHERE `+s.Filter(Live(), Window).String()+`
	GROUP BY service, host`, func(c *columns) func(int) hostSpikes {
		service, host, hwClass := col[string](c, "service"), col[string](c, "host"), col[string](c, "hw_class")
		n, last := col[uint64](c, "n"), col[time.Time](c, "last")
		return func(i int) hostSpikes {
			return hostSpikes{service.Row(i), host.Row(i), hwClass.Row(i), int(n.Row(i)), last.Row(i).UTC()}
		}
	})
	if err != nil {
		return nil, err
	}
	type key struct{ service, host string }
	byHost := make(map[key]int, len(latency))
	for i, h := range latency {
		byHost[key{h.Service, h.Host}] = i
	}
	hosts := latency
	for _, sp := range spikes {
		i, ok := byHost[key{sp.service, sp.host}]
		if !ok {
			// Spikes whose latency rows are gone (latency_1s TTL) or not
			// there yet still count.
			hosts = append(hosts, Host{Service: sp.service, Host: sp.host, HWClass: sp.hwClass})
			i = len(hosts) - 1
		}
		last := sp.last
		hosts[i].Spikes, hosts[i].LastSpike = sp.n, &last
	}
	sort.Slice(hosts, func(a, b int) bool {
		ha, hb := hosts[a], hosts[b]
		switch {
		case ha.Spikes != hb.Spikes:
			return ha.Spikes > hb.Spikes
		case ha.MaxMS != hb.MaxMS:
			return ha.MaxMS > hb.MaxMS
		case ha.Service != hb.Service:
			return ha.Service < hb.Service
		default:
			return ha.Host < hb.Host
		}
	})
	return hosts, nil
}

// ServiceSummaries counts, per service in name order, its hosts, those
// with spikes, and the median spikes per affected host.
func ServiceSummaries(hosts []Host) []ServiceSummary {
	by := map[string]*ServiceSummary{}
	counts := map[string][]int{}
	var order []string
	for _, h := range hosts {
		t := by[h.Service]
		if t == nil {
			t = &ServiceSummary{Service: h.Service}
			by[h.Service] = t
			order = append(order, h.Service)
		}
		t.Hosts++
		if h.Spikes > 0 {
			t.HostsWithSpikes++
			counts[h.Service] = append(counts[h.Service], h.Spikes)
		}
	}
	sort.Strings(order)
	out := make([]ServiceSummary, 0, len(order))
	for _, svc := range order {
		t := by[svc]
		t.MedianSpikes = median(counts[svc])
		out = append(out, *t)
	}
	return out
}

// HostSummaries is one line per service: "N of M hosts had spikes (X%);
// median Y spikes per affected host".
func HostSummaries(hosts []Host, withService bool) []string {
	var lines []string
	for _, t := range ServiceSummaries(hosts) {
		line := fmt.Sprintf("%d of %d hosts had spikes (%s)", t.HostsWithSpikes, t.Hosts, pct(share(int64(t.HostsWithSpikes), int64(t.Hosts))))
		if t.HostsWithSpikes > 0 {
			line += fmt.Sprintf("; median %s spikes per affected host", strconv.FormatFloat(t.MedianSpikes, 'f', -1, 64))
		}
		if withService {
			line = t.Service + ": " + line
		}
		lines = append(lines, line)
	}
	return lines
}

func median(v []int) float64 {
	s := append([]int(nil), v...)
	sort.Ints(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return float64(s[n/2])
	}
	return float64(s[n/2-1]+s[n/2]) / 2
}
