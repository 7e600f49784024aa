// Package storecare looks after the data of the embedded store that
// `spikehunt serve-clickhouse` serves: the free space of its volume, and
// the parts the engine can no longer read.
//
// A full volume can leave a part the engine committed but cannot read (a
// marks file written empty, a column cut short). Every statement that
// touches such a part fails, and so does every merge of it, for as long as
// it stays in its table: the detector's passes, the dashboards' panels,
// the merges that keep the part count down. The engine takes such a part
// out of its table on its own only when it boots.
//
// The Carer does it while the store runs. Every round it
//
//   - reads the volume's free space, and remembers when it ran low;
//   - reads the engine's own error counts (system.errors) for errors that
//     say a part of ours is broken;
//   - once the space is back, reads every part written since it ran low;
//   - takes a part whose read fails with a corruption error out of its
//     table (ALTER TABLE … DETACH PART; the files stay under the table's
//     detached/ folder for a person to look at);
//   - rebuilds what the part held when the table is fed by a materialized
//     view (latency_1s from requests, latency_1m from latency_1s): the
//     view's own SELECT over the part's time range, into a table of the
//     same structure, attached in place of the range's rows. A part of a
//     table no view feeds (requests, counters, the detector's tables) is
//     counted as lost rows.
//
// What it did is logged, counted on /metrics and written into counters
// for the "Pipeline health" dashboard (docs/store-care.md).
package storecare
