// Package ingest moves the OTLP records on Kafka into the store, exactly
// once: a Source (Kafka, or the demo's in-process log) gives batches, the
// decoders turn spans and metric points into column rows without pdata,
// and Ingester flushes them with an intent record that makes a retried or
// crashed flush count once (intent.go). Poison records go to a dead-letter
// store; the ingest's own figures go to the counters table.
//
// One goroutine runs an Ingester; it is not safe for concurrent use. The
// caller closes it, which closes its Source.
//
// Why one package: the decoders write straight into the flush's column
// buffers, which the intent, dedup and dead-letter logic own; split, the
// row types and buffers would be exported only for one another. Each file
// is one stage (source_*, decode*, rows_*, flush, intent, dedup, dlq).
package ingest
