-- The deduplication window of the tables the ingest inserts into, raised
-- on tables created with the earlier default (1000 blocks) to Options'
-- DedupWindow (default 20000). The ingest checks at start that the window
-- covers every block that may go into a table between a batch's first
-- insert and its last retry, and refuses to start when it does not
-- (pipelines/services/ingest/dedup.go): 1000 blocks covered barely two Kafka
-- partitions at its defaults. MODIFY SETTING changes only the setting;
-- parts are not rewritten.
ALTER TABLE {{.Local "requests"}}{{.OnCluster}} MODIFY SETTING {{.Dedup}};
ALTER TABLE {{.Local "counters"}}{{.OnCluster}} MODIFY SETTING {{.Dedup}};
ALTER TABLE {{.Local "latency_1s"}}{{.OnCluster}} MODIFY SETTING {{.Dedup}};
ALTER TABLE {{.Local "latency_1m"}}{{.OnCluster}} MODIFY SETTING {{.Dedup}};
