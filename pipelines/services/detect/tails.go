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
// body's p99), in hosts with minMinutes of them. A host too slow for that
// (under 100 requests a minute) has its tailBlock blocks read the same
// way: at one request a second a block holds 300, and a host stalling 20
// s every 15 minutes, one request in 45, had its merged p99 on its stalls
// and none of them found.
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
	tailBlock         = 5 * time.Minute
	tailSettle        = DefaultPad
)

// tailsAt is when the host tails a pass over [from, to) reads were
// computed: the latest within tailRefresh before from (or after it, up to
// to), or to itself, computed now. Tails over m minutes of the fleet's
// data serve for a sixth of that, m × 10 s, at most tailRefresh: a fleet
// just come up has its tails computed anew on every pass for its first
// minutes, which read little, and the fleet row (fleetTailHost) stands
// for its young hosts from its fifth minute, not from its tenth. The age
// is counted at the pass's start, not its end: a live pass of 30 s sees
// no difference, and the first pass of a catch-up (detect.Run, an hour
// after an outage) is judged by the tails of the pass before the outage,
// computed at its start, rather than computing them anew at its end.
func tailsAt(ctx context.Context, st store.Store, service string, from, to time.Time) (time.Time, error) {
	tab, err := store.Select(ctx, st, render(tailsAtTmpl, tailsParams{Service: service, To: to, Since: from.Add(-tailRefresh), FleetHost: fleetTailHost}))
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
		if from.Sub(at) < min(tailRefresh, time.Duration(minutes)*youngTailsServe) {
			return at, nil
		}
	}
	at := to.Truncate(time.Second)
	if err := refreshTails(ctx, st, service, at); err != nil {
		return time.Time{}, fmt.Errorf("detect: host tails of %s: %w", service, err)
	}
	return at, nil
}

// refreshTails computes service's host tails over the tailLookback before
// at into host_tails, stamped at. The look-back's whole blocks that ended
// tailSettle before at are read from host_tail_blocks, those not kept yet
// computed from latency_1m and kept first; the rest (the look-back's
// first, partial block and its last tailSettle or so) is read from
// latency_1m. A live detector's refresh so reads about half an hour of
// digests, not six hours: at 1,000 hosts 2.2 CPU-s became about 0.4
// (docs/benchmarks.md).
func refreshTails(ctx context.Context, st store.Store, service string, at time.Time) error {
	p := newTailsParams(service, at)
	if p.KeptTo.After(p.KeptFrom) {
		tab, err := store.Select(ctx, st, render(tailBlocksKeptTmpl, p))
		if err != nil {
			return err
		}
		kept := map[int64]bool{}
		for _, r := range tab.Rows {
			var b int64
			if _, err := fmt.Sscan(r[0], &b); err != nil {
				return fmt.Errorf("kept block %q", r[0])
			}
			kept[b] = true
		}
		if p.Missing = missingBlocks(p.KeptFrom, p.KeptTo, kept); len(p.Missing) > 0 {
			if err := st.Exec(ctx, render(tailBlocksKeepTmpl, p)); err != nil {
				return err
			}
		}
	}
	return st.Exec(ctx, render(tailsRefreshTmpl, p))
}

// newTailsParams are a refresh's at at, its missing blocks not known yet.
func newTailsParams(service string, at time.Time) tailsParams {
	p := tailsParams{Service: service, To: at, From: at.Add(-tailLookback),
		PollutedOver: pollutedOver, MinMinuteRequests: minMinuteRequests, MinMinutes: minMinutes,
		BlockSeconds: int64(tailBlock / time.Second)}
	p.KeptFrom = p.From.Add(tailBlock - time.Nanosecond).Truncate(tailBlock)
	p.KeptTo = at.Add(-tailSettle).Truncate(tailBlock)
	if p.KeptTo.Before(p.KeptFrom) {
		p.KeptTo = p.KeptFrom
	}
	return p
}

// missingBlocks are the runs of tailBlock blocks in [from, to) that kept
// does not hold (unix seconds of a block's start), as [start, end) pairs.
func missingBlocks(from, to time.Time, kept map[int64]bool) [][2]time.Time {
	var runs [][2]time.Time
	for b := from; b.Before(to); b = b.Add(tailBlock) {
		if kept[b.Unix()] {
			continue
		}
		if n := len(runs); n > 0 && runs[n-1][1].Equal(b) {
			runs[n-1][1] = b.Add(tailBlock)
		} else {
			runs = append(runs, [2]time.Time{b, b.Add(tailBlock)})
		}
	}
	return runs
}

type tailsParams struct {
	Service, FleetHost              string
	From, To, Since                 time.Time
	MinMinutes, BlockSeconds        int64
	PollutedOver, MinMinuteRequests float64
	// The refresh's kept blocks, [KeptFrom, KeptTo), and the runs of them
	// not kept yet.
	KeptFrom, KeptTo time.Time
	Missing          [][2]time.Time
}

// The latest tails within tailRefresh, and the minutes of data the fleet's
// row of them spans.
var tailsAtTmpl = sqlTemplate("host tails at", `
SELECT toInt64(max(computed_to)) AS at, toInt64(argMaxIf(minutes, computed_to, host = {{str .FleetHost}})) AS minutes
FROM host_tails FINAL
WHERE service = {{str .Service}} AND computed_to > {{sec .Since}} AND computed_to <= {{sec .To}}`)

// A block's figures, over latency_1m's rows where .Where holds, per host
// and block: what host_tail_blocks keeps and the refresh merges.
const tailBlocksSQL = `
        SELECT host, toDateTime(intDiv(toUInt32(ts), {{.BlockSeconds}}) * {{.BlockSeconds}}, 'UTC') AS block,
            sum(weighted_count) AS n,
            uniqExactState(ts) AS mins,
            min(toUInt32(ts)) AS first,
            max(toUInt32(ts)) AS last,
            quantilesTDigestWeightedMergeState(0.5, 0.9, 0.99, 0.999)(quantiles_us) AS digest,
            finalizeAggregation(digest) AS block_qs,
            block_qs[2] AS p90,
            block_qs[3] AS p99,
            countIf(weighted_count >= {{float .MinMinuteRequests}}) AS usable_minutes,
            -- Finalized only where kept: most minutes of a slow host are not.
            arrayMap(f -> f[2], groupArrayIf(if(weighted_count >= {{float .MinMinuteRequests}}, finalizeAggregation(quantiles_us), []), weighted_count >= {{float .MinMinuteRequests}}) AS minute_qs) AS minute_p90s,
            arrayMap(f -> f[3], minute_qs) AS minute_p99s
        FROM latency_1m`

// The kept blocks of the refresh's look-back.
var tailBlocksKeptTmpl = sqlTemplate("host tail blocks kept", `
SELECT DISTINCT toInt64(toUnixTimestamp(block))
FROM host_tail_blocks
WHERE service = {{hex .Service}} AND block >= {{sec .KeptFrom}} AND block < {{sec .KeptTo}}`)

// The look-back's blocks not kept yet, computed and kept.
var tailBlocksKeepTmpl = sqlTemplate("host tail blocks", `
INSERT INTO host_tail_blocks (service, host, block, n, mins, first, last, digest, p90, p99, usable_minutes, minute_p90s, minute_p99s)
SELECT {{hex .Service}}, host, block, n, mins, first, last, digest, p90, p99, usable_minutes, minute_p90s, minute_p99s
FROM (`+tailBlocksSQL+`
        WHERE service = {{hex .Service}} AND ({{range $i, $r := .Missing}}{{if $i}} OR {{end}}(ts >= {{sec (index $r 0)}} AND ts < {{sec (index $r 1)}}){{end}})
        GROUP BY host, block
)`)

var tailsRefreshTmpl = sqlTemplate("host tails", `
INSERT INTO host_tails (service, host, computed_to, tail_n, minutes, rate, p90_us, p99_us, merged_p99_us)
SELECT {{hex .Service}}, host, {{sec .To}}, tail_n, minutes, rate,
    multiIf(usable >= {{.MinMinutes}} AND q[2] > {{float .PollutedOver}} * m90, m90,
        usable_blocks >= {{.MinMinutes}} AND q[2] > {{float .PollutedOver}} * b90, b90, q[2]),
    multiIf(usable >= {{.MinMinutes}} AND q[3] > {{float .PollutedOver}} * m99, m99,
        usable_blocks >= {{.MinMinutes}} AND q[3] > {{float .PollutedOver}} * b99, b99, q[3]),
    q[3]
FROM (
    SELECT host,
        sum(n) AS tail_n,
        toUInt32(uniqExactMerge(mins)) AS minutes,
        tail_n / greatest(60, max(last) - min(first) + 60) AS rate,
        quantilesTDigestWeightedMerge(0.5, 0.9, 0.99, 0.999)(digest) AS q,
        -- The median minute's, of the minutes with requests enough (a
        -- minute not merged yet is in several rows, each a part of it).
        sum(usable_minutes) AS usable,
        arrayReduce('quantileExact(0.5)', groupArrayArray(minute_p90s)) AS m90,
        arrayReduce('quantileExact(0.5)', groupArrayArray(minute_p99s)) AS m99,
        -- The median block's, where minutes are too few requests each.
        countIf(n >= {{float .MinMinuteRequests}}) AS usable_blocks,
        quantileExactIf(0.5)(p90, n >= {{float .MinMinuteRequests}}) AS b90,
        quantileExactIf(0.5)(p99, n >= {{float .MinMinuteRequests}}) AS b99
    FROM (
        SELECT host, block, n, mins, first, last, digest, p90, p99, usable_minutes, minute_p90s, minute_p99s
        FROM host_tail_blocks FINAL
        WHERE service = {{hex .Service}} AND block >= {{sec .KeptFrom}} AND block < {{sec .KeptTo}}
        UNION ALL
        SELECT host, block, n, mins, first, last, digest, p90, p99, usable_minutes, minute_p90s, minute_p99s FROM (`+tailBlocksSQL+`
        WHERE service = {{hex .Service}} AND ((ts >= {{sec .From}} AND ts < {{sec .KeptFrom}}) OR (ts >= {{sec .KeptTo}} AND ts < {{sec .To}}))
        GROUP BY host, block)
    )
    -- The fleet's row too: host '' (fleetTailHost), over every host's.
    GROUP BY host WITH ROLLUP
)`)
