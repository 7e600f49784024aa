package testenv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// What a test asks a KafkaCluster about its topics and quorum: who leads,
// who is in sync.

// CreateTopic creates a topic with replication factor 3 and returns once
// every partition has a leader and all three replicas in sync. An existing
// topic is an error that matches kerr.TopicAlreadyExists with errors.Is.
func (c *KafkaCluster) CreateTopic(ctx context.Context, name string, partitions int32) error {
	cl, err := c.Client()
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, KafkaClusterNodes, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("testenv: create topic %q: %w", name, err)
	}
	return c.WaitInSync(ctx, name)
}

// PartitionState is who leads a partition and who is in sync with it, as
// node indexes (0 to KafkaClusterNodes-1).
type PartitionState struct {
	Leader int // -1: none
	ISR    []int
}

// Partition reads the partition's leader and in-sync replicas from the
// cluster's metadata.
func (c *KafkaCluster) Partition(ctx context.Context, topic string, partition int32) (PartitionState, error) {
	cl, err := c.Client()
	if err != nil {
		return PartitionState{}, err
	}
	defer cl.Close()
	md, err := kadm.NewClient(cl).Metadata(ctx, topic)
	if err != nil {
		return PartitionState{}, fmt.Errorf("testenv: metadata of %s: %w", topic, err)
	}
	td, ok := md.Topics[topic]
	if !ok || td.Err != nil {
		return PartitionState{}, fmt.Errorf("testenv: metadata of %s: %v", topic, td.Err)
	}
	p, ok := td.Partitions[partition]
	if !ok {
		return PartitionState{}, fmt.Errorf("testenv: %s has no partition %d", topic, partition)
	}
	st := PartitionState{Leader: int(p.Leader) - 1}
	if p.Leader < 0 {
		st.Leader = -1
	}
	for _, r := range p.ISR {
		st.ISR = append(st.ISR, int(r)-1)
	}
	slices.Sort(st.ISR)
	return st, nil
}

// Leader is the index of the node that leads the partition.
func (c *KafkaCluster) Leader(ctx context.Context, topic string, partition int32) (int, error) {
	st, err := c.Partition(ctx, topic, partition)
	if err != nil {
		return -1, err
	}
	if st.Leader < 0 {
		return -1, fmt.Errorf("testenv: %s/%d has no leader", topic, partition)
	}
	return st.Leader, nil
}

// WaitInSync returns once every partition of the topics has a leader and
// all three replicas in its ISR, or ctx ends: what an operator waits for
// (no under-replicated partition) before taking the next node down.
func (c *KafkaCluster) WaitInSync(ctx context.Context, topics ...string) error {
	cl, err := c.Client()
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var last string
	for {
		md, err := adm.Metadata(ctx, topics...)
		if err == nil {
			if last = underReplicated(md, topics); last == "" {
				return nil
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testenv: %v not in sync on %d nodes (%s): %w", topics, KafkaClusterNodes, last, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// underReplicated describes the first partition of topics without a
// leader or with fewer than every node in sync; "" when there is none.
func underReplicated(md kadm.Metadata, topics []string) string {
	for _, t := range topics {
		td, ok := md.Topics[t]
		if !ok || td.Err != nil || len(td.Partitions) == 0 {
			return fmt.Sprintf("%s: not in the metadata (%v)", t, td.Err)
		}
		for _, p := range td.Partitions.Sorted() {
			if p.Err != nil || p.Leader < 0 || len(p.ISR) < KafkaClusterNodes {
				isr := make([]int32, len(p.ISR))
				for i, id := range p.ISR {
					isr[i] = id - 1
				}
				return fmt.Sprintf("%s/%d: leader node %d, in sync nodes %v", t, p.Partition, p.Leader-1, isr)
			}
		}
	}
	return ""
}

// ActiveController is the index of the node that leads the controller
// quorum (a DescribeQuorum request, which a broker forwards to the
// controllers).
func (c *KafkaCluster) ActiveController(ctx context.Context) (int, error) {
	cl, err := c.Client()
	if err != nil {
		return -1, err
	}
	defer cl.Close()
	p := kmsg.NewDescribeQuorumRequestTopicPartition()
	t := kmsg.NewDescribeQuorumRequestTopic()
	t.Topic, t.Partitions = "__cluster_metadata", []kmsg.DescribeQuorumRequestTopicPartition{p}
	req := kmsg.NewPtrDescribeQuorumRequest()
	req.Topics = []kmsg.DescribeQuorumRequestTopic{t}
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err == nil && (len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1) {
		err = errors.New("the answer names no partition")
	}
	if err != nil {
		return -1, fmt.Errorf("testenv: describe the controller quorum: %w", err)
	}
	rp := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
		return -1, fmt.Errorf("testenv: describe the controller quorum: %w", err)
	}
	return int(rp.LeaderID) - 1, nil
}
