// Package schema owns spikehunt's ClickHouse tables: versioned, idempotent
// migrations, written once as SQL templates (migrations/NNNN_name.sql) and
// rendered for a single server or for a cluster.
//
//   - Single server (Options.Cluster empty): MergeTree-family tables under
//     their plain names; retried inserts are deduplicated through
//     non_replicated_deduplication_window.
//   - Cluster: every statement runs ON CLUSTER; rows live in
//     Replicated*MergeTree tables named <table>_local, read and written
//     through Distributed tables under the plain names, so queries are the
//     same text in both modes. Materialized views read and write the local
//     tables, so each server rolls up the rows it stores.
//
// Apply records each version in schema_migrations once all its statements
// succeeded; a failed migration is retried from its first statement on the
// next run (every statement is IF NOT EXISTS).
//
// What writers and readers must know:
//   - Ingest deduplicates retried batches with insert_deduplication_token.
//     Through a Distributed table, insert with distributed_foreground_insert
//     = 1 so the token reaches the replicas in the same call; a deduplicated
//     block is not pushed into latency_1s again (and with
//     deduplicate_blocks_in_dependent_materialized_views = 1, the 26.x
//     default, a retry that failed half-way completes the rollup without
//     counting twice).
//   - spikes, spike_suspects, patterns and captures are ReplacingMergeTree:
//     read them with FINAL (or argMax by the version column). Their sharding
//     key is part of their sorting key, so the row that replaces another
//     lands on the same shard and FINAL stays correct through Distributed.
//   - TTL options take effect when a table is created. Changing them later
//     needs ALTER TABLE … MODIFY TTL; Apply does not rewrite live tables.
package schema
