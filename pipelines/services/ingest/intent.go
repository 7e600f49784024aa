package ingest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
)

// The exactly-once handshake (see migrations/0005_ingest.sql). For each
// batch of one partition, offsets [first, last]:
//
//  1. write the intent (group, topic, partition, first, last);
//  2. insert the rows with insert_deduplication_token = token(first, last);
//  3. commit last+1 to Kafka.
//
// A crash before 1 leaves nothing; the next owner reads from first and
// forms whatever batch it likes. A crash between 1 and 3 leaves an intent
// whose first is the committed offset: the next owner re-forms exactly
// [first, last] and inserts it with the same token, which ClickHouse drops
// if step 2 had landed. Batches are closed only between polls, so a
// rebalance takes a partition mid-handshake only from a member that had
// to let go of it: one whose dead letters the topic refuses (held across
// polls; flush.go) or whose lease ran out (fenced). Its next owner
// re-forms the batch from the intent, as after a crash.
//
// A token ClickHouse has seen does not prove its rows landed: a batch
// that may be a repeat is checked after its insert (landed.go).
//
// A batch ClickHouse refuses for its rows is split (flush.go): each half
// is inserted with token(first, last) + "/split/" + the half's offsets.
// The halves depend only on the batch's messages, so a re-formed batch
// splits the same way and a half that landed is dropped as a repeat.

// intent is one partition's pending batch.
type intent struct{ first, last int64 }

func token(group, topic string, partition int32, first, last int64) string {
	return fmt.Sprintf("%s/%s/%d/%d-%d", group, topic, partition, first, last)
}

func writeIntent(ctx context.Context, st store.Store, group, topic string, partition int32, it intent) error {
	q := fmt.Sprintf("INSERT INTO ingest_intents (consumer_group, topic, partition, first_offset, last_offset, written_at) SELECT %s, %s, %d, %d, %d, now64(6)",
		store.QuoteString(group), store.QuoteString(topic), partition, it.first, it.last)
	return st.Exec(ctx, q, store.WithSetting("distributed_foreground_insert", "1"))
}

// readIntent returns the partition's newest intent, if any.
func readIntent(ctx context.Context, st store.Store, group, topic string, partition int32) (intent, bool, error) {
	q := fmt.Sprintf("SELECT first_offset, last_offset FROM ingest_intents FINAL WHERE consumer_group = %s AND topic = %s AND partition = %d",
		store.QuoteString(group), store.QuoteString(topic), partition)
	t, err := store.Select(ctx, st, q)
	if err != nil {
		return intent{}, false, err
	}
	if len(t.Rows) == 0 {
		return intent{}, false, nil
	}
	first, err1 := strconv.ParseInt(strings.TrimSpace(t.Rows[0][0]), 10, 64)
	last, err2 := strconv.ParseInt(strings.TrimSpace(t.Rows[0][1]), 10, 64)
	if err1 != nil || err2 != nil {
		return intent{}, false, fmt.Errorf("ingest_intents: unreadable row %q", t.Rows[0])
	}
	return intent{first, last}, true, nil
}

// uniqueToken is a token no other insert has.
func uniqueToken() string {
	return fmt.Sprintf("nodedup/%d/%d", time.Now().UnixNano(), rand.Uint64())
}

// backoff doubles from 100 ms to 10 s.
func backoff(d time.Duration) time.Duration {
	if d == 0 {
		return 100 * time.Millisecond
	}
	return min(2*d, 10*time.Second)
}
