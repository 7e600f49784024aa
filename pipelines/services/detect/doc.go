// Package detect is spikehunt's detectors (docs/design.md §5): ClickHouse SQL
// run from Go over the store, in three stages per service.
//
//  1. Spike windows (spikes.go): per host and second, the weighted mean
//     latency from latency_1s against max(Floor, K × base), the base being
//     the larger of the host's and the fleet's typical latency in the
//     second's 10-minute bucket, or the share of the second's requests
//     over that bar (a tenth, three or more, counted in latency_hist);
//     a second slow by its mean needs company (two requests over a pair
//     bar in it and the seconds either side) or one request beyond a lone
//     bar, both from the host's own tail (tails.go, kept in host_tails);
//     slow seconds merge across short gaps. Per
//     endpoint too (endpoints.go), from requests: slow requests of one
//     endpoint that finished together (or a lone one far past the body's
//     tail) are a window of their host unless a host window holds them.
//     Rows go to spikes.
//  2. Suspects (suspects.go): for each window, every kernel counter series
//     of its host compared with the same series over the half hour before,
//     as a robust deviation; the most deviating go to spike_suspects.
//  3. Patterns (patterns.go, classify.go): the spike windows of a
//     look-back, per host, classified by a pure function (Classify) as
//     fleet-recurrent, fleet-synchronized or isolated-host, with the
//     hw-class-skewed modifier; rows go to patterns.
//
// Pass runs the three once over a time range; Run repeats it on an
// interval (spikehunt detect). Both are incremental and idempotent: a pass
// recomputes the windows starting in its range (reading a pad before it,
// so a window straddling the range's start is seen whole), rewrites them
// with the same sorting key (ReplacingMergeTree keeps the newest
// detected_at), and retracts with is_deleted = 1 the rows of its range
// that it no longer produces. Readers use FINAL and is_deleted = 0.
//
// Hazards: two passes over the same service must not run at once — each
// retracts, as stale, rows of its range that it did not write itself.
// detected_at is the row version: it comes from Config.Now, made strictly
// increasing within the process; a clock that steps back across processes
// makes a later pass lose to an earlier one until the clock catches up.
// The embedded engine cannot interrupt a statement: a cancelled pass
// returns at once while its statement runs to its end in the background.
//
// The statements are text/template with named values (sqlTemplate in
// sql.go). Their renderings for a few configs are checked in under
// testdata/sql, so a change to one is reviewed as a diff of the SQL the
// engine receives: go test ./pipelines/services/detect -run TestGoldenSQL -update.
//
// Why one package: the stages (spikes, suspects, patterns, endpoints)
// are SQL over each other's tables, rendered from one config by one
// template helper and run in one pass whose order and idempotence this
// package owns; each stage is its own file with its own golden SQL.
//
// Imports: store only (and schema in tests). cmd imports this package;
// nothing here imports cmd, sim or eval.
package detect
