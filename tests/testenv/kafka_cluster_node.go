package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// clusterNode is one node of a KafkaCluster: its folder, ports and the
// current run of its JVM.
type clusterNode struct {
	index          int // 0 to KafkaClusterNodes-1; node.id is index+1
	dir            string
	logDir         string
	addr           string // the SSL listener
	controllerAddr string
	log            *TailBuffer

	mu   sync.Mutex
	proc *brokerProcess // nil while stopped
}

func (n *clusterNode) id() int32 { return int32(n.index + 1) }

// writeNodeFiles writes the node's server.properties and log configuration.
func (c *KafkaCluster) writeNodeFiles(n *clusterNode, voters string) error {
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return fmt.Errorf("testenv: kafka cluster: %w", err)
	}
	files := map[string]string{
		"server.properties": c.nodeProperties(n, voters),
		"log4j.properties":  log4jProperties,
		"log4j2.properties": log4j2Properties,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(n.dir, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("testenv: kafka cluster: %w", err)
		}
	}
	return nil
}

func (c *KafkaCluster) nodeProperties(n *clusterNode, voters string) string {
	props := map[string]string{
		"process.roles":             "broker,controller",
		"node.id":                   strconv.Itoa(int(n.id())),
		"controller.quorum.voters":  voters,
		"listeners":                 "SSL://" + n.addr + ",CONTROLLER://" + n.controllerAddr,
		"advertised.listeners":      "SSL://" + n.addr,
		"controller.listener.names": "CONTROLLER",
		// The brokers replicate over TLS too; only the controllers'
		// quorum stays plaintext, on loopback.
		"inter.broker.listener.name":     "SSL",
		"listener.security.protocol.map": "SSL:SSL,CONTROLLER:PLAINTEXT",
		"ssl.keystore.type":              "PEM",
		"ssl.keystore.location":          filepath.Join(c.dir, "keystore.pem"),
		"ssl.truststore.type":            "PEM",
		"ssl.truststore.location":        c.caFile,
		"log.dirs":                       n.logDir,
		"num.partitions":                 "1",
		"default.replication.factor":     "3",
		"min.insync.replicas":            "2",
		"auto.create.topics.enable":      "true",
		"unclean.leader.election.enable": "false",
		// The internal topics as a production cluster has them: RF 3, two
		// in sync. One partition each starts faster than 50.
		"offsets.topic.replication.factor":                 "3",
		"offsets.topic.num.partitions":                     "1",
		"transaction.state.log.replication.factor":         "3",
		"transaction.state.log.min.isr":                    "2",
		"transaction.state.log.num.partitions":             "1",
		"share.coordinator.state.topic.replication.factor": "3",
		"share.coordinator.state.topic.min.isr":            "2",
		"group.initial.rebalance.delay.ms":                 "0",
		"log.cleaner.dedupe.buffer.size":                   strconv.Itoa(16 << 20),
	}
	for k, v := range c.opts.Properties {
		props[k] = v
	}
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# written by spikehunt tests/testenv (kafka cluster)\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, props[k])
	}
	return b.String()
}

// format formats the node's storage for the cluster id. The voters are
// static (controller.quorum.voters), so no --standalone.
func (c *KafkaCluster) format(ctx context.Context, n *clusterNode, clusterID string) error {
	cmd := exec.CommandContext(ctx, c.java, kafkaJavaArgs(c.opts.MaxHeap, n.dir, c.libs, "kafka.tools.StorageTool",
		"format", "-t", clusterID, "-c", filepath.Join(n.dir, "server.properties"))...)
	cmd.Dir = n.dir
	cmd.SysProcAttr = childProcAttr()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("testenv: kafka cluster: format node %d in %s: %w\n%s", n.index, n.logDir, err, lastLines(string(out), 20))
	}
	return nil
}

// startProcess starts the node's JVM without waiting for it. Its process
// group is registered with the reaper until it exits, on top of
// Pdeathsig, so that a test binary that dies leaves no node behind.
func (c *KafkaCluster) startProcess(n *clusterNode) error {
	cmd := exec.Command(c.java, kafkaJavaArgs(c.opts.MaxHeap, n.dir, c.libs, "kafka.Kafka", filepath.Join(n.dir, "server.properties"))...)
	cmd.Dir = n.dir
	cmd.SysProcAttr = childProcAttr()
	cmd.Stdout, cmd.Stderr = n.log, n.log
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testenv: kafka cluster: start node %d: %w", n.index, err)
	}
	pg := []int{cmd.Process.Pid}
	guardErr := theReaper.guard(pg)
	p := &brokerProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = theReaper.release(pg)
		close(p.done)
	}()
	n.mu.Lock()
	n.proc = p
	n.mu.Unlock()
	if guardErr != nil {
		_ = n.stop(0)
		return guardErr
	}
	return nil
}

// waitNodeReady polls the node itself with metadata requests until it
// lists itself among the brokers (registered and unfenced), the process
// exits, or ctx ends.
func (c *KafkaCluster) waitNodeReady(ctx context.Context, n *clusterNode) error {
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if p == nil {
		return fmt.Errorf("testenv: kafka cluster: node %d is not running", n.index)
	}
	cl, err := c.clientOf([]string{n.addr})
	if err != nil {
		return err
	}
	defer cl.Close()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := cl.SeedBrokers()[0].Request(attempt, kmsg.NewPtrMetadataRequest())
		cancel()
		if err == nil {
			md := resp.(*kmsg.MetadataResponse)
			if slices.ContainsFunc(md.Brokers, func(b kmsg.MetadataResponseBroker) bool { return b.NodeID == n.id() }) {
				return nil
			}
			err = fmt.Errorf("metadata lists %d brokers, not this one", len(md.Brokers))
		}
		lastErr = err
		select {
		case <-p.done:
			return fmt.Errorf("testenv: kafka cluster: node %d exited before it was ready (%v); log tail:\n%s", n.index, p.err, lastLines(n.log.String(), 40))
		case <-ctx.Done():
			return fmt.Errorf("testenv: kafka cluster: node %d at %s not ready (last error: %v): %w; log tail:\n%s",
				n.index, n.addr, lastErr, ctx.Err(), lastLines(n.log.String(), 40))
		case <-tick.C:
		}
	}
}

// stop ends the node's JVM: SIGTERM and up to grace for it to exit, then
// SIGKILL; a zero grace kills at once. Stopping a stopped node does nothing.
func (n *clusterNode) stop(grace time.Duration) error {
	n.mu.Lock()
	p := n.proc
	n.proc = nil
	n.mu.Unlock()
	if p == nil {
		return nil
	}
	return stopProcess(p, grace)
}

// running says whether the node's JVM is alive.
func (n *clusterNode) running() bool {
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}
