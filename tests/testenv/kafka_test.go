package testenv_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestSharedKafkaCreatesTopicsAndRefusesDuplicates(t *testing.T) {
	k := testenv.SharedKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if got := k.Brokers(); len(got) != 1 || !strings.HasPrefix(got[0], "127.0.0.1:") {
		t.Fatalf("Brokers() = %v, want one address on 127.0.0.1", got)
	}
	if err := k.CreateTopic(ctx, "testenv-create", 2); err != nil {
		t.Fatal(err)
	}
	err := k.CreateTopic(ctx, "testenv-create", 2)
	if !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Fatalf("second CreateTopic: got %v, want an error matching kerr.TopicAlreadyExists", err)
	}
	if !strings.Contains(k.Log(), "Kafka Server started") {
		t.Errorf("Log() lacks the broker's start line; got %d bytes", len(k.Log()))
	}
}

// produced is what the producer learned about one record: the acknowledged
// position, and whether some attempt failed (its data may still have been
// written, so only such records may appear twice).
type produced struct {
	acked     bool
	partition int32
	offset    int64
	failed    bool
}

func TestKafkaKeepsEveryAcknowledgedRecordAcrossRestart(t *testing.T) {
	const (
		total        = 100_000
		restartAfter = 50_000 // acknowledged records before the restart begins
		holdBackFrom = 90_000 // records from here are first produced after the restart
		maxInFlight  = 5_000
		topic        = "testenv-restart"
	)
	k := testenv.SharedKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 75*time.Second)
	defer cancel()
	if err := k.CreateTopic(ctx, topic, 3); err != nil {
		t.Fatal(err)
	}

	producer, err := k.Client(
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), // idempotent writes are the default with acks=all
		// Shorter than a restart, so records caught by it fail and take the
		// retry path below rather than waiting inside the client.
		kgo.RecordDeliveryTimeout(4*time.Second),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()

	type result struct {
		key int
		r   *kgo.Record
		err error
	}
	results := make(chan result, maxInFlight)
	records := make([]produced, total)
	produce := func(key int) {
		r := &kgo.Record{Key: recordKey(key), Value: recordValue(key)}
		producer.Produce(ctx, r, func(r *kgo.Record, err error) {
			results <- result{key, r, err}
		})
	}

	start := time.Now()
	var (
		next, inFlight, ackedCount, failures int
		failureCauses                        = map[string]int{}
		retry                                []int
		restartDone                          = make(chan error, 1)
		restarting                           bool
		restartErr                           error
		restarted                            bool
		restartTook                          time.Duration
	)
	for ackedCount < total {
		for inFlight < maxInFlight {
			if len(retry) > 0 {
				produce(retry[0])
				retry = retry[1:]
			} else if next < total && (next < holdBackFrom || restarted) {
				produce(next)
				next++
			} else {
				break
			}
			inFlight++
		}
		select {
		case res := <-results:
			inFlight--
			p := &records[res.key]
			if res.err != nil {
				p.failed = true
				failures++
				failureCauses[res.err.Error()]++
				retry = append(retry, res.key)
				continue
			}
			if p.acked {
				t.Fatalf("record %d acknowledged twice", res.key)
			}
			p.acked, p.partition, p.offset = true, res.r.Partition, res.r.Offset
			ackedCount++
			if ackedCount == restartAfter && !restarting {
				restarting = true
				go func() {
					began := time.Now()
					err := k.Restart(ctx)
					restartTook = time.Since(began)
					restartDone <- err
				}()
			}
		case restartErr = <-restartDone:
			if restartErr != nil {
				t.Fatalf("restart: %v", restartErr)
			}
			restarted = true
		case <-ctx.Done():
			t.Fatalf("producing: %v with %d of %d records acknowledged (%d failed attempts, restarted=%v)",
				ctx.Err(), ackedCount, total, failures, restarted)
		}
	}
	if !restarted {
		t.Fatal("all records acknowledged before the restart finished; the hold-back did not work")
	}
	t.Logf("produced %d records in %v; restart took %v; %d failed attempts retried (by cause: %v)",
		total, time.Since(start).Round(time.Millisecond), restartTook.Round(time.Millisecond), failures, failureCauses)

	got := consumeAll(ctx, t, k, topic)
	var missing, duplicated, misplaced []int
	retriedDuplicates := 0
	for key, p := range records {
		switch n := len(got.positions[key]); {
		case n == 0:
			missing = append(missing, key)
		case n > 1 && !p.failed:
			duplicated = append(duplicated, key)
		case n > 1:
			retriedDuplicates++
		}
		if !got.at(p.partition, p.offset, key) {
			misplaced = append(misplaced, key)
		}
	}
	if len(missing) > 0 || len(duplicated) > 0 || len(misplaced) > 0 || got.foreign > 0 {
		t.Fatalf("acknowledged records missing: %d %v; duplicated without a failed attempt: %d %v; "+
			"not at their acknowledged offset: %d %v; records with unexpected key or value: %d",
			len(missing), head(missing), len(duplicated), head(duplicated), len(misplaced), head(misplaced), got.foreign)
	}
	t.Logf("consumed %d records; %d retried records appear twice (allowed: their first attempt failed)",
		got.count, retriedDuplicates)
}

// consumed indexes what a fresh consumer read from the start of a topic.
type consumed struct {
	positions map[int][][2]int64 // key -> (partition, offset) of each copy
	count     int
	foreign   int // records whose key or value this test did not write
}

func (c consumed) at(partition int32, offset int64, key int) bool {
	for _, pos := range c.positions[key] {
		if pos == [2]int64{int64(partition), offset} {
			return true
		}
	}
	return false
}

// consumeAll reads every partition of topic from offset 0 up to the end
// offsets listed before it starts.
func consumeAll(ctx context.Context, t *testing.T, k *testenv.Kafka, topic string) consumed {
	t.Helper()
	admin, err := k.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ends, err := kadm.NewClient(admin).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("list end offsets of %s: %v", topic, err)
	}
	remaining := map[int32]int64{} // partition -> end offset not yet reached
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			remaining[o.Partition] = o.Offset
		}
	})

	consumer, err := k.Client(
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()

	got := consumed{positions: make(map[int][][2]int64)}
	for len(remaining) > 0 {
		fetches := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consuming %s: %v; partitions not read to their end (partition: end offset): %v", topic, ctx.Err(), remaining)
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			t.Errorf("fetch %s/%d: %v", topic, partition, err)
		})
		fetches.EachRecord(func(r *kgo.Record) {
			got.count++
			key, ok := parseRecord(r)
			if !ok {
				got.foreign++
			} else {
				got.positions[key] = append(got.positions[key], [2]int64{int64(r.Partition), r.Offset})
			}
			if end, ok := remaining[r.Partition]; ok && r.Offset+1 >= end {
				delete(remaining, r.Partition)
			}
		})
		if t.Failed() {
			t.FailNow()
		}
	}
	return got
}

func recordKey(key int) []byte   { return fmt.Appendf(nil, "key-%06d", key) }
func recordValue(key int) []byte { return fmt.Appendf(nil, "value-%06d", key) }

func parseRecord(r *kgo.Record) (int, bool) {
	var key int
	if _, err := fmt.Sscanf(string(r.Key), "key-%06d", &key); err != nil {
		return 0, false
	}
	return key, string(r.Value) == string(recordValue(key))
}

// head returns at most the first ten keys, for messages.
func head(keys []int) []int {
	return keys[:min(len(keys), 10)]
}
