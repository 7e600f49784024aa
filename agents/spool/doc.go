// Package spool is the agent's bounded on-disk outage spool: a durable FIFO
// of opaque byte records. While Kafka or the Collector is unreachable the
// exporter appends each encoded export request (with its own small header)
// here; a replayer reads the records back in order, delivers them and
// acknowledges them. Delivery is at least once: a record is replayed until
// an Ack covering it has been persisted.
//
// # Lifecycle
//
// Open takes an exclusive lock on the directory (flock; none on Windows),
// recovers what is on disk, and with FsyncInterval > 0 starts one goroutine
// that fsyncs in the background. Close stops it, fsyncs, marks the spool
// closed cleanly and releases the lock; every call after Close returns
// ErrClosed. Append never blocks on readers: at the MaxBytes cap it drops
// the oldest segment, counted. Read does its disk I/O outside the lock
// Append takes. Memory: about 16 bytes per spooled record plus the buffer
// of one record.
//
// # On-disk format
//
// Dir holds:
//
//	00000000000000000001.seg   segment files, named after the sequence
//	00000000000000004097.seg   number of their first record (20 digits)
//	ack                        the ack point (two slots, written in turn)
//	lock                       the flock target
//
// A segment is a run of frames, integers little-endian:
//
//	[magic u8 = 0xD5][len u32][crc u32][payload: len bytes]
//
// crc is CRC-32C (Castagnoli) over the four len bytes and the payload.
// Records are numbered from 1; within a segment each frame takes the next
// number. A new segment starts when the next frame would pass SegmentBytes;
// the one it ends is fsynced first, so only the last segment can have a
// torn tail. Segments are deleted whole: when Ack has covered all their
// records (except the segment being written), or when the cap needs room.
//
// The ack file has two slots a page apart, each "SPAK", version 2, flags
// (bit 0: closed cleanly), the last acknowledged sequence number (u64),
// the writer's FsyncInterval in nanoseconds (u64), a generation (u64) and
// a CRC-32C of those 30 bytes; the intact slot of the higher generation
// counts. Open writes the file whole (ack.tmp, fsynced, renamed over ack);
// later writes overwrite the older slot in place and fsync the file, so a
// torn write leaves the one before it. The 26-byte version 1 file of
// earlier agents is still read. The directory is fsynced after every
// segment creation and deletion and after the ack rename.
//
// # Crash safety and the loss bound
//
// Each Append is one write(2) into the segment file before it returns. A
// killed process (kill -9, OOM kill) therefore loses nothing Append
// returned; a write the kill interrupted leaves a torn frame that Open cuts
// off. A machine crash or power loss can lose what was not yet fsynced: the
// records appended in the last FsyncInterval (none with FsyncInterval 0),
// and acknowledgements persisted in the last FsyncInterval, whose records
// are then replayed again. Recovery.Clean and Recovery.LossWindow tell the
// agent which case it restarts from, so it can report the bound.
//
// Open never fails on damaged data; it repairs and counts:
//   - a frame with a bad CRC whose length still leads to the next frame is
//     skipped (Recovery.CorruptRecords) and numbering continues past it;
//   - in a sealed segment, a damaged length loses the framing until the
//     next intact frame; the stretch is skipped and counted once, and the
//     records after it are numbered back from the next segment's name;
//   - in the last segment, a torn or unframeable tail is truncated
//     (Recovery.TornRecords, TruncatedBytes): its numbering cannot be
//     trusted past the damage.
//
// Read checks every CRC again and never returns a damaged payload. A
// persisted ack point ahead of the surviving records (acknowledged, then
// lost in a machine crash) is kept, and numbering resumes after it, so a
// new record can never be taken for an acknowledged one.
package spool
