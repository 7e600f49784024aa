-- ingest_intents: the batch each ingest consumer is about to insert, per
-- Kafka partition. The ingest writes the row before it inserts the batch
-- (with an insert_deduplication_token naming the same offsets) and commits
-- the offsets to Kafka after. A consumer that takes over a partition whose
-- committed offset is the first of an intent re-forms exactly that batch:
-- if the crashed insert landed, the same token makes the retry a no-op; if
-- not, the retry inserts it. Either way, once.
CREATE TABLE IF NOT EXISTS {{.Local "ingest_intents"}}{{.OnCluster}}
(
    consumer_group  LowCardinality(String),
    topic           LowCardinality(String),
    partition       Int32,
    first_offset    Int64,
    last_offset     Int64,
    written_at      DateTime64(6, 'UTC')
)
-- One live row per partition: the newest intent replaces the older ones.
ENGINE = {{.Engine "ReplacingMergeTree" "ingest_intents" "written_at"}}
ORDER BY (consumer_group, topic, partition)
-- A partition's intents only matter until the next batch commits.
TTL toDateTime(written_at) + INTERVAL 30 DAY;

-- A partition's rows live on one shard, so FINAL through the Distributed
-- table sees every version of them together.
{{.Distributed "ingest_intents" "cityHash64(consumer_group, topic, partition)"}};
