package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/kafkasec"
)

// KafkaClusterNodes is how many nodes StartKafkaCluster runs: three KRaft
// voters, so that the quorum and every partition (replication factor 3,
// min.insync.replicas 2) survive one node down.
const KafkaClusterNodes = 3

// KafkaCluster is three KRaft nodes, each broker and controller in one
// JVM, on loopback: a quorum of three voters, default replication factor
// 3 and min.insync.replicas 2, and clients and brokers talking TLS (an SSL
// listener whose certificate is issued by CA). The controller listener is
// plaintext on loopback. Its methods are safe for concurrent use; a node's
// Kill, Start and Restart are visible to every client.
type KafkaCluster struct {
	opts   KafkaClusterOptions
	java   string
	libs   string
	dir    string // owned by the cluster; removed by Stop
	ca     *TestCA
	caFile string
	nodes  [KafkaClusterNodes]*clusterNode

	mu      sync.Mutex // serializes Kill, Shutdown, Start and Stop
	stopped bool
}

// StartKafkaCluster formats three nodes' storage and starts them on free
// loopback ports, returning once each answers as a broker and all three
// are registered. The caller owns the cluster and must call Stop, which
// also removes its folders. The JVMs die with the test binary however it
// ends (Pdeathsig, and the reaper on Linux).
func StartKafkaCluster(opts KafkaClusterOptions) (*KafkaCluster, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	single := KafkaOptions{MaxHeap: opts.MaxHeap, StartTimeout: opts.StartTimeout, StopTimeout: opts.StopTimeout, LogLimit: opts.LogLimit}.withDefaults()
	opts.MaxHeap, opts.StartTimeout, opts.StopTimeout, opts.LogLimit = single.MaxHeap, single.StartTimeout, single.StopTimeout, single.LogLimit
	c := &KafkaCluster{opts: opts}
	var err error
	if c.libs = opts.Libs; c.libs == "" {
		paths, err := Paths()
		if err != nil {
			return nil, err
		}
		if c.libs, err = paths.KafkaLibsDir(); err != nil {
			return nil, err
		}
	}
	if c.java, err = kafkaJava(opts.Java); err != nil {
		return nil, err
	}
	if c.dir, err = os.MkdirTemp("", "spikehunt-kafka-cluster-"); err != nil {
		return nil, fmt.Errorf("testenv: kafka cluster: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.StartTimeout)
	defer cancel()
	if err := c.prepare(ctx); err != nil {
		c.removeData()
		return nil, err
	}
	if err := c.launchAll(ctx); err != nil {
		c.removeData()
		return nil, err
	}
	return c, nil
}

// prepare makes the CA and the nodes' certificate, picks the ports, writes
// each node's configuration and formats the nodes' storage (at once: each
// format is a JVM start).
func (c *KafkaCluster) prepare(ctx context.Context) error {
	ca, err := NewTestCA("spikehunt testenv kafka cluster CA")
	if err != nil {
		return err
	}
	c.ca = ca
	// One certificate for the three nodes: they share the loopback address.
	cert, key, err := ca.Issue("kafka-cluster-node", "127.0.0.1", "localhost")
	if err != nil {
		return err
	}
	c.caFile = filepath.Join(c.dir, "ca.crt")
	for name, b := range map[string][]byte{"keystore.pem": append(append([]byte{}, key...), cert...), "ca.crt": ca.CertPEM()} {
		if err := os.WriteFile(filepath.Join(c.dir, name), b, 0o600); err != nil {
			return fmt.Errorf("testenv: kafka cluster: %w", err)
		}
	}
	ports, err := freePorts(2 * KafkaClusterNodes)
	if err != nil {
		return fmt.Errorf("testenv: kafka cluster: %w", err)
	}
	voters := make([]string, KafkaClusterNodes)
	for i := range c.nodes {
		n := &clusterNode{
			index:          i,
			dir:            filepath.Join(c.dir, "node-"+strconv.Itoa(i)),
			addr:           net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i])),
			controllerAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i+1])),
			log:            NewTailBuffer(c.opts.LogLimit),
		}
		n.logDir = filepath.Join(n.dir, "data")
		if c.opts.LogDirs != nil {
			n.logDir = c.opts.LogDirs[i]
		}
		c.nodes[i] = n
		voters[i] = fmt.Sprintf("%d@%s", n.id(), n.controllerAddr)
	}
	clusterID, err := newClusterID()
	if err != nil {
		return fmt.Errorf("testenv: kafka cluster: cluster id: %w", err)
	}
	errs := make([]error, KafkaClusterNodes)
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		if err := c.writeNodeFiles(n, strings.Join(voters, ",")); err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.format(ctx, n, clusterID)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// launchAll starts the three JVMs together (a node waits for a quorum of
// voters) and waits until each is a registered broker.
func (c *KafkaCluster) launchAll(ctx context.Context) error {
	for _, n := range c.nodes {
		if err := c.startProcess(n); err != nil {
			c.killAll()
			return err
		}
	}
	for _, n := range c.nodes {
		if err := c.waitNodeReady(ctx, n); err != nil {
			c.killAll()
			return err
		}
	}
	return nil
}

// Brokers returns the nodes' TLS listener addresses, in node order.
func (c *KafkaCluster) Brokers() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.addr
	}
	return addrs
}

// CA is the authority that issued the nodes' certificate.
func (c *KafkaCluster) CA() *TestCA { return c.ca }

// ClientSecurity is the client configuration of the nodes' listener: TLS
// with the cluster's CA (a file in the cluster's folder, until Stop).
func (c *KafkaCluster) ClientSecurity() kafkasec.Config {
	return kafkasec.Config{TLS: kafkasec.TLSConfig{Enabled: true, CAFile: c.caFile}}
}

// Client returns a franz-go client seeded with every node and speaking
// TLS; opts come after and may add to them. The caller closes it.
func (c *KafkaCluster) Client(opts ...kgo.Opt) (*kgo.Client, error) {
	return c.clientOf(c.Brokers(), opts...)
}

func (c *KafkaCluster) clientOf(seeds []string, opts ...kgo.Opt) (*kgo.Client, error) {
	sec, err := c.ClientSecurity().Options()
	if err != nil {
		return nil, fmt.Errorf("testenv: kafka cluster client: %w", err)
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, sec...), opts...)...)
	if err != nil {
		return nil, fmt.Errorf("testenv: kafka cluster client: %w", err)
	}
	return cl, nil
}

// Kill ends node i with SIGKILL, at once: no controlled shutdown, no
// flush. Its ports and data stay for Start.
func (c *KafkaCluster) Kill(i int) error {
	n, err := c.lockNode(i)
	if err != nil {
		return err
	}
	defer c.mu.Unlock()
	fmt.Fprintf(n.log, "\n===== testenv: node %d killed (SIGKILL) at %s =====\n", i, time.Now().Format(time.RFC3339Nano))
	return wrapIf(n.stop(0), fmt.Sprintf("testenv: kafka cluster: kill node %d", i))
}

// Start starts node i again on its ports and data, if it is not running,
// and returns once it is a registered broker (it may still be catching up
// its replicas: see WaitInSync).
func (c *KafkaCluster) Start(ctx context.Context, i int) error {
	n, err := c.lockNode(i)
	if err != nil {
		return err
	}
	defer c.mu.Unlock()
	if n.running() {
		return nil
	}
	return c.relaunch(ctx, n)
}

// Shutdown stops node i gracefully (SIGTERM: a controlled shutdown that
// moves its leaderships away first) and leaves it stopped; past
// StopTimeout it is killed, and Shutdown returns the error.
func (c *KafkaCluster) Shutdown(i int) error {
	n, err := c.lockNode(i)
	if err != nil {
		return err
	}
	defer c.mu.Unlock()
	fmt.Fprintf(n.log, "\n===== testenv: node %d shut down (SIGTERM) at %s =====\n", i, time.Now().Format(time.RFC3339Nano))
	return wrapIf(n.stop(c.opts.StopTimeout), fmt.Sprintf("testenv: kafka cluster: shut down node %d", i))
}

// Restart is Shutdown then Start: the way an operator rolls a node. If
// the stop times out the node is killed and left stopped, and Restart
// returns the error.
func (c *KafkaCluster) Restart(ctx context.Context, i int) error {
	if err := c.Shutdown(i); err != nil {
		return err
	}
	return c.Start(ctx, i)
}

// Running says whether node i's JVM runs: false after Kill, or after the
// node stopped by itself (a broker halts when its log directory fails).
func (c *KafkaCluster) Running(i int) bool {
	n, err := c.node(i)
	return err == nil && n.running()
}

// PID is node i's JVM's process id, 0 while it is stopped: for a test
// that samples the broker's memory.
func (c *KafkaCluster) PID(i int) int {
	n, err := c.node(i)
	if err != nil {
		return 0
	}
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if p == nil || !n.running() {
		return 0
	}
	return p.cmd.Process.Pid
}

func (c *KafkaCluster) relaunch(ctx context.Context, n *clusterNode) error {
	fmt.Fprintf(n.log, "\n===== testenv: node %d started at %s =====\n", n.index, time.Now().Format(time.RFC3339Nano))
	sctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	if err := c.startProcess(n); err != nil {
		return err
	}
	if err := c.waitNodeReady(sctx, n); err != nil {
		_ = n.stop(0)
		return err
	}
	return nil
}

// Stop kills every node at once and removes the cluster's folders (and
// empties LogDirs). A graceful stop would gain nothing, since the data
// goes, and three nodes stopping together wait on a quorum that is
// leaving. Later calls do nothing.
func (c *KafkaCluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	c.stopped = true
	err := c.killAll()
	return errors.Join(err, c.removeData())
}

func (c *KafkaCluster) killAll() error {
	var errs []error
	for _, n := range c.nodes {
		if n != nil {
			errs = append(errs, wrapIf(n.stop(0), fmt.Sprintf("testenv: kafka cluster: stop node %d", n.index)))
		}
	}
	return errors.Join(errs...)
}

func (c *KafkaCluster) removeData() error {
	var errs []error
	for _, d := range c.opts.LogDirs {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			errs = append(errs, os.RemoveAll(filepath.Join(d, e.Name())))
		}
	}
	errs = append(errs, os.RemoveAll(c.dir))
	return wrapIf(errors.Join(errs...), "testenv: kafka cluster: remove data")
}

// Log returns node i's combined stdout and stderr across its runs, at
// most LogLimit bytes (the newest).
func (c *KafkaCluster) Log(i int) string {
	n, err := c.node(i)
	if err != nil {
		return err.Error()
	}
	return n.log.String()
}

// LogTails is the last lines of every node's log, for a failed test.
func (c *KafkaCluster) LogTails(lines int) string {
	var b strings.Builder
	for i, n := range c.nodes {
		fmt.Fprintf(&b, "----- kafka node %d (%s) -----\n%s\n", i, n.addr, lastLines(n.log.String(), lines))
	}
	return b.String()
}

// LogDir is node i's log.dirs.
func (c *KafkaCluster) LogDir(i int) string {
	n, err := c.node(i)
	if err != nil {
		return ""
	}
	return n.logDir
}

// lockNode returns node i with c.mu held, for the caller to unlock, or an
// error (c.mu not held) for an index out of range or a stopped cluster.
func (c *KafkaCluster) lockNode(i int) (*clusterNode, error) {
	n, err := c.node(i)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil, ErrKafkaStopped
	}
	return n, nil
}

func (c *KafkaCluster) node(i int) (*clusterNode, error) {
	if i < 0 || i >= len(c.nodes) {
		return nil, fmt.Errorf("testenv: kafka cluster: no node %d (nodes are 0 to %d)", i, len(c.nodes)-1)
	}
	return c.nodes[i], nil
}
