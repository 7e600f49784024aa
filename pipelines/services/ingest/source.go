package ingest

import "context"

// Message is one record of a source: a Kafka record, or one of the
// in-process source's.
type Message struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	// Lag is how many messages of the partition follow this one, as of
	// when it was fetched; −1 when unknown.
	Lag int64
}

// Source is where the ingester's messages come from and where it commits:
// Kafka (KafkaSource), or an in-process log for the embedded demo
// (MemorySource). Both go through the same batching and handshake.
type Source interface {
	// Poll returns the next messages, in offset order per partition, or
	// none once ctx ends. An error ends the ingester.
	Poll(ctx context.Context) ([]Message, error)
	// Commit records that the partition's messages before next are stored.
	Commit(ctx context.Context, topic string, partition int32, next int64) error
	// DeadLetter keeps a message that can never be ingested, with why.
	DeadLetter(ctx context.Context, d DeadLetter) error
	// Prepare is called once before the first Poll: it makes sure the
	// dead-letter store exists, and returns how many partitions each
	// source topic that exists has (nil: the source has no fixed
	// partitions to size the deduplication window by, and every topic
	// exists). A source topic missing from a non-nil answer does not exist
	// yet: it is not fetched, and the source watches for it.
	Prepare(ctx context.Context) (map[string]int32, error)
	// Appeared returns, without blocking, the source topics missing at
	// Prepare that have come to exist since, with their partition counts;
	// each is returned once, and not fetched until Start.
	Appeared() map[string]int32
	// Start begins fetching a topic Appeared returned.
	Start(topic string)
	// Hold stops fetching the partition; Release resumes it from next
	// (next < 0: from where it was). Messages of the partition already
	// polled are the ingester's to ignore.
	Hold(topic string, partition int32)
	Release(topic string, partition int32, next int64)
	// Between marks the end of a poll's work: a source that moves
	// partitions between consumers may do it now, and only now.
	Between()
	// Close releases the source.
	Close()
}

// partitionOwner is told which partitions it gains and loses; the
// ingester implements it, a source calls it from Poll or Between.
type partitionOwner interface {
	// assigned returns the partitions whose intent it could not read
	// before ctx ended: their messages must not be handed to it yet.
	assigned(ctx context.Context, parts map[string][]int32) (unread map[string][]int32)
	dropped(parts map[string][]int32)
}
