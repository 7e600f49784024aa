package detect

import (
	"context"
	"fmt"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
)

// Each host's own tail, which its company bars come from (spikeWindowsSQL):
// its requests, minutes with data and rate over tailLookback before a
// pass's end, and the p90 and p99 of its body. They are computed from
// latency_1m's digests into host_tails at most every tailRefresh of data
// time, and read from there by every pass: merging six hours of digests
// took 2.7 s for 1,000 hosts on two cores, every pass, every 30 s.
//
// p90 and p99 are the merged digests' unless the host's own stalls hold
// one request in a hundred or more, which puts its merged p99 on them (a
// host stalling every few minutes at a rate a stall holds many requests
// of; a host minutes old). Then the merged p99 lies more than
// pollutedOver times the median minute's p99, and the median minute's
// stands for the body: it moves only when more than half the minutes
// hold a stall. A minute's p99 is read only from minutes of
// minMinuteRequests requests or more (at fewer it is nearer the minute's
// max than its p99, and the median of those stands lower than the
// body's p99), in hosts with minMinutes of them.
//
// Beside the hosts' rows, each refresh writes the fleet's: host
// fleetTailHost (no host is named so: the ingest refuses an empty
// host.name), over every host's requests, its p90 and p99 those of the
// service's pooled body (its rate is the fleet's, which the spike rule
// does not read). A host without a tail of its own, one just come up, has
// its bars from there (spikeWindowsSQL): a young host's first requests
// say nothing of how far its body reaches, but the fleet's, in 2,000
// pooled requests and fleetTailMinutes minutes, do. Five minutes, as for
// a host's own: before, a stall the whole fleet shares, or in a fleet of
// one host its own, can be one request in a hundred and the pooled p99
// (with 2 minutes the cause lab's one host lost two of its three
// NET_RX stalls, which fell in its minutes 2 to 5).
const (
	tailRefresh       = 10 * time.Minute
	youngTailsServe   = 10 * time.Second
	fleetTailHost     = ""
	fleetTailMinutes  = 5
	pollutedOver      = 3
	minMinuteRequests = 100
	minMinutes        = 5
)

// tailsAt is when the host tails a pass at to reads were computed: the
// latest within tailRefresh before to, or to itself, computed now. Tails
// over m minutes of the fleet's data serve for a sixth of that, m × 10 s,
// at most tailRefresh: a fleet just come up has its tails computed anew
// on every pass for its first minutes, which read little, and the fleet
// row (fleetTailHost) stands for its young hosts from its fifth minute,
// not from its tenth.
func tailsAt(ctx context.Context, st store.Store, service string, to time.Time) (time.Time, error) {
	tab, err := store.Select(ctx, st, render(tailsAtTmpl, tailsParams{Service: service, To: to, Since: to.Add(-tailRefresh), FleetHost: fleetTailHost}))
	if err != nil {
		return time.Time{}, fmt.Errorf("detect: host tails of %s: %w", service, err)
	}
	if len(tab.Rows) == 1 && tab.Rows[0][0] != "0" {
		var s, minutes int64
		if _, err := fmt.Sscan(tab.Rows[0][0], &s); err != nil {
			return time.Time{}, fmt.Errorf("detect: host tails of %s: %q", service, tab.Rows[0][0])
		}
		if _, err := fmt.Sscan(tab.Rows[0][1], &minutes); err != nil {
			return time.Time{}, fmt.Errorf("detect: host tails of %s: %q", service, tab.Rows[0][1])
		}
		at := time.Unix(s, 0).UTC()
		if to.Sub(at) < min(tailRefresh, time.Duration(minutes)*youngTailsServe) {
			return at, nil
		}
	}
	at := to.Truncate(time.Second)
	if err := st.Exec(ctx, tailsRefreshSQL(service, at)); err != nil {
		return time.Time{}, fmt.Errorf("detect: host tails of %s: %w", service, err)
	}
	return at, nil
}

// tailsRefreshSQL computes service's host tails over the tailLookback
// before at into host_tails, stamped at.
func tailsRefreshSQL(service string, at time.Time) string {
	return render(tailsRefreshTmpl, tailsParams{Service: service, To: at, From: at.Add(-tailLookback),
		PollutedOver: pollutedOver, MinMinuteRequests: minMinuteRequests, MinMinutes: minMinutes})
}

type tailsParams struct {
	Service, FleetHost              string
	From, To, Since                 time.Time
	MinMinutes                      int64
	PollutedOver, MinMinuteRequests float64
}

// The latest tails within tailRefresh, and the minutes of data the fleet's
// row of them spans.
var tailsAtTmpl = sqlTemplate("host tails at", `
SELECT toInt64(max(computed_to)) AS at, toInt64(argMaxIf(minutes, computed_to, host = {{str .FleetHost}})) AS minutes
FROM host_tails FINAL
WHERE service = {{str .Service}} AND computed_to > {{sec .Since}} AND computed_to <= {{sec .To}}`)

var tailsRefreshTmpl = sqlTemplate("host tails", `
INSERT INTO host_tails (service, host, computed_to, tail_n, minutes, rate, p90_us, p99_us, merged_p99_us)
SELECT {{hex .Service}}, host, {{sec .To}}, tail_n, minutes, rate,
    if(usable >= {{.MinMinutes}} AND q[2] > {{float .PollutedOver}} * m90, m90, q[2]),
    if(usable >= {{.MinMinutes}} AND q[3] > {{float .PollutedOver}} * m99, m99, q[3]),
    q[3]
FROM (
    SELECT host,
        sum(weighted_count) AS tail_n,
        toUInt32(uniqExact(ts)) AS minutes,
        tail_n / greatest(60, max(toUInt32(ts)) - min(toUInt32(ts)) + 60) AS rate,
        quantilesTDigestWeightedMerge(0.5, 0.9, 0.99, 0.999)(quantiles_us) AS q,
        -- The median minute's, of the minutes with requests enough (a
        -- minute not merged yet is in several rows, each a part of it).
        countIf(weighted_count >= {{float .MinMinuteRequests}}) AS usable,
        quantileExactIf(0.5)(finalizeAggregation(quantiles_us)[2], weighted_count >= {{float .MinMinuteRequests}}) AS m90,
        quantileExactIf(0.5)(finalizeAggregation(quantiles_us)[3], weighted_count >= {{float .MinMinuteRequests}}) AS m99
    FROM latency_1m
    WHERE service = {{hex .Service}} AND ts >= {{sec .From}} AND ts < {{sec .To}}
    -- The fleet's row too: host '' (fleetTailHost), over every host's.
    GROUP BY host WITH ROLLUP
)`)
