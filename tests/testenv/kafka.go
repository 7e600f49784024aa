package testenv

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaOptions configures StartKafka. The zero value is ready to use.
type KafkaOptions struct {
	// Libs is the folder of Kafka jars. Empty: Paths().KafkaLibsDir().
	Libs string
	// Java is the java binary. Empty: java from PATH.
	Java string
	// MaxHeap is the JVM's -Xmx value. Empty: 512m. Every test package that
	// starts a broker pays it, and `go test ./...` runs packages in parallel.
	MaxHeap string
	// StartTimeout bounds formatting the storage plus waiting until the
	// broker answers a metadata request; Restart uses it for the second half.
	// Zero: 90s. The broker is ready 3-5s after the JVM starts on 2 cores.
	StartTimeout time.Duration
	// StopTimeout bounds a graceful stop (SIGTERM) before the process group
	// is killed. Zero: 30s.
	StopTimeout time.Duration
	// LogLimit is how many bytes of broker output Log keeps, the newest.
	// Zero: 4 MiB.
	LogLimit int
	// Properties are added to server.properties, replacing generated keys of
	// the same name. Do not set listeners, log.dirs, node.id or the
	// controller keys: Brokers, Restart and the readiness wait rely on them.
	Properties map[string]string
	// SASLSSL adds a SASL_SSL listener (kafka_secure.go), for the tests of
	// the clients' TLS and SASL. Nil: PLAINTEXT only, which starts faster.
	SASLSSL *SASLSSLOptions
	// Host is the IP address the client listeners bind and advertise, e.g.
	// a test cluster's node address that its pods reach. Empty: 127.0.0.1.
	// The controller listener stays on loopback.
	Host string
}

const (
	defaultKafkaHeap         = "512m"
	defaultKafkaStartTimeout = 90 * time.Second
	defaultKafkaStopTimeout  = 30 * time.Second
	defaultKafkaLogLimit     = 4 << 20
	minKafkaLogLimit         = 4 << 10
	maxKafkaLogLimit         = 256 << 20
)

// Validate checks the options that are set; zero values get defaults.
func (o KafkaOptions) Validate() error {
	if o.StartTimeout < 0 {
		return fmt.Errorf("testenv: KafkaOptions.StartTimeout %v is negative", o.StartTimeout)
	}
	if o.StopTimeout < 0 {
		return fmt.Errorf("testenv: KafkaOptions.StopTimeout %v is negative", o.StopTimeout)
	}
	if o.LogLimit != 0 && (o.LogLimit < minKafkaLogLimit || o.LogLimit > maxKafkaLogLimit) {
		return fmt.Errorf("testenv: KafkaOptions.LogLimit %d is outside [%d, %d]", o.LogLimit, minKafkaLogLimit, maxKafkaLogLimit)
	}
	if o.MaxHeap != "" && strings.ContainsAny(o.MaxHeap, " \t\n") {
		return fmt.Errorf("testenv: KafkaOptions.MaxHeap %q is not a single JVM size such as 512m", o.MaxHeap)
	}
	if o.Host != "" && net.ParseIP(o.Host) == nil {
		return fmt.Errorf("testenv: KafkaOptions.Host %q is not an IP address", o.Host)
	}
	if o.SASLSSL != nil {
		return o.SASLSSL.Validate()
	}
	return nil
}

func (o KafkaOptions) withDefaults() KafkaOptions {
	if o.MaxHeap == "" {
		o.MaxHeap = defaultKafkaHeap
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = defaultKafkaStartTimeout
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = defaultKafkaStopTimeout
	}
	if o.LogLimit == 0 {
		o.LogLimit = defaultKafkaLogLimit
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	return o
}

// Kafka is a single-node KRaft broker (broker and controller in one JVM)
// listening on 127.0.0.1 (or KafkaOptions.Host). Its methods are safe for concurrent use, but a
// Restart is visible to every client of the broker.
type Kafka struct {
	opts           KafkaOptions
	java           string
	libs           string
	dir            string // owned by the Kafka; removed by Stop
	brokerAddr     string
	controllerAddr string
	secureAddr     string  // the SASL_SSL listener; empty without KafkaOptions.SASLSSL
	ca             *TestCA // issued the SASL_SSL listener's certificate
	log            *TailBuffer

	mu      sync.Mutex // serializes Restart and Stop
	proc    *brokerProcess
	stopped bool
}

// brokerProcess is one run of the JVM.
type brokerProcess struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd.Wait has returned
	err  error         // cmd.Wait's result; read only after done is closed
}

// ErrKafkaStopped is returned by Restart after Stop.
var ErrKafkaStopped = errors.New("testenv: kafka broker was stopped")

// StartKafka formats a fresh data folder and starts a broker on free
// loopback ports, returning once a client can fetch metadata from it. The
// caller owns the broker and must call Stop, which also removes its folder.
func StartKafka(opts KafkaOptions) (*Kafka, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	k := &Kafka{opts: opts, log: NewTailBuffer(opts.LogLimit)}

	var err error
	if k.libs = opts.Libs; k.libs == "" {
		paths, err := Paths()
		if err != nil {
			return nil, err
		}
		if k.libs, err = paths.KafkaLibsDir(); err != nil {
			return nil, err
		}
	}
	if k.java, err = kafkaJava(opts.Java); err != nil {
		return nil, err
	}

	ctx, cancel := context.WithTimeout(context.Background(), opts.StartTimeout)
	defer cancel()
	if k.dir, err = os.MkdirTemp("", "spikehunt-kafka-"); err != nil {
		return nil, fmt.Errorf("testenv: kafka: %w", err)
	}
	if err := k.prepare(ctx); err != nil {
		os.RemoveAll(k.dir)
		return nil, err
	}
	if err := k.launch(ctx); err != nil {
		os.RemoveAll(k.dir)
		return nil, err
	}
	return k, nil
}

// kafkaJava is the java binary to run: java, or java from PATH.
func kafkaJava(java string) (string, error) {
	if java != "" {
		return java, nil
	}
	path, err := exec.LookPath("java")
	if err != nil {
		return "", fmt.Errorf("testenv: java not found: install a Java 17+ runtime (Debian: apt-get install openjdk-17-jre-headless): %w", err)
	}
	return path, nil
}

// prepare picks the ports, writes the configuration and formats the storage.
func (k *Kafka) prepare(ctx context.Context) error {
	ports, err := freePorts(3)
	if err != nil {
		return fmt.Errorf("testenv: kafka: %w", err)
	}
	k.brokerAddr = net.JoinHostPort(k.opts.Host, strconv.Itoa(ports[0]))
	k.controllerAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
	if k.opts.SASLSSL != nil {
		k.secureAddr = net.JoinHostPort(k.opts.Host, strconv.Itoa(ports[2]))
		if err := k.writeSecureFiles(); err != nil {
			return err
		}
	}

	files := map[string]string{
		"server.properties": k.serverProperties(),
		"log4j.properties":  log4jProperties,
		"log4j2.properties": log4j2Properties,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(k.dir, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("testenv: kafka: %w", err)
		}
	}

	clusterID, err := newClusterID()
	if err != nil {
		return fmt.Errorf("testenv: kafka: cluster id: %w", err)
	}
	format := []string{"format", "-t", clusterID, "-c", filepath.Join(k.dir, "server.properties"), "--standalone"}
	if k.opts.SASLSSL != nil {
		format = append(format, k.scramFormatArgs()...)
	}
	cmd := exec.CommandContext(ctx, k.java, k.javaArgs("kafka.tools.StorageTool", format...)...)
	cmd.Dir = k.dir
	cmd.SysProcAttr = childProcAttr()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("testenv: kafka: format storage in %s: %w\n%s", k.dir, err, lastLines(string(out), 20))
	}
	return nil
}

func (k *Kafka) serverProperties() string {
	props := [][2]string{
		{"process.roles", "broker,controller"},
		{"node.id", "1"},
		{"controller.quorum.bootstrap.servers", k.controllerAddr},
		{"listeners", "PLAINTEXT://" + k.brokerAddr + ",CONTROLLER://" + k.controllerAddr},
		{"advertised.listeners", "PLAINTEXT://" + k.brokerAddr},
		{"controller.listener.names", "CONTROLLER"},
		{"inter.broker.listener.name", "PLAINTEXT"},
		{"listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"},
		{"log.dirs", filepath.Join(k.dir, "data")},
		{"num.partitions", "1"},
		{"default.replication.factor", "1"},
		{"min.insync.replicas", "1"},
		{"auto.create.topics.enable", "true"},
		// A single node cannot satisfy the default replication factor of 3
		// for the internal topics; with it, groups and transactions hang.
		{"offsets.topic.replication.factor", "1"},
		{"offsets.topic.num.partitions", "1"},
		{"transaction.state.log.replication.factor", "1"},
		{"transaction.state.log.min.isr", "1"},
		{"transaction.state.log.num.partitions", "1"},
		{"share.coordinator.state.topic.replication.factor", "1"},
		{"share.coordinator.state.topic.min.isr", "1"},
		// Without this a new consumer group waits 3s before its first assignment.
		{"group.initial.rebalance.delay.ms", "0"},
		// The log cleaner allocates this much heap up front (default 128 MiB).
		{"log.cleaner.dedupe.buffer.size", strconv.Itoa(16 << 20)},
	}
	if k.secureAddr != "" {
		for key, add := range map[string]string{
			"listeners":                      ",SASL_SSL://" + k.secureAddr,
			"advertised.listeners":           ",SASL_SSL://" + k.secureAddr,
			"listener.security.protocol.map": ",SASL_SSL:SASL_SSL",
		} {
			for j := range props {
				if props[j][0] == key {
					props[j][1] += add
				}
			}
		}
		props = append(props, k.secureProperties()...)
	}
	index := make(map[string]int, len(props))
	for i, p := range props {
		index[p[0]] = i
	}
	extra := make([]string, 0, len(k.opts.Properties))
	for key := range k.opts.Properties {
		extra = append(extra, key)
	}
	sort.Strings(extra)
	for _, key := range extra {
		if i, ok := index[key]; ok {
			props[i][1] = k.opts.Properties[key]
		} else {
			props = append(props, [2]string{key, k.opts.Properties[key]})
		}
	}
	var b strings.Builder
	b.WriteString("# written by spikehunt tests/testenv\n")
	for _, p := range props {
		fmt.Fprintf(&b, "%s=%s\n", p[0], p[1])
	}
	return b.String()
}

// The jars bind SLF4J to reload4j (log4j 1.x API), which reads
// log4j.properties; Kafka's Log4jController also touches log4j2-core, which
// prints "Reconfiguration failed" unless it has a configuration of its own.
const log4jProperties = `log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.Target=System.out
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
# The full configuration dump is ~1500 lines per start; server.properties has what we set.
log4j.logger.org.apache.kafka.common.config.AbstractConfig=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.request.logger=WARN
`

const log4j2Properties = `status = warn
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.target = SYSTEM_OUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = STDOUT
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = warn
`

// javaArgs are the JVM arguments to run mainClass from the Kafka jars with
// the test logging setup.
func (k *Kafka) javaArgs(mainClass string, args ...string) []string {
	return kafkaJavaArgs(k.opts.MaxHeap, k.dir, k.libs, mainClass, args...)
}

// kafkaJavaArgs are javaArgs for a node whose heap is heap, whose log
// configuration is in dir and whose jars are in libs.
func kafkaJavaArgs(heap, dir, libs, mainClass string, args ...string) []string {
	jvm := []string{
		"-Xmx" + heap,
		"-Xms64m",
		// Tests care about start time and few threads, not throughput.
		"-XX:+UseSerialGC",
		"-XX:TieredStopAtLevel=1",
		"-Djava.awt.headless=true",
		"-Dlog4j.configuration=file:" + filepath.Join(dir, "log4j.properties"),
		"-Dlog4j2.configurationFile=" + filepath.Join(dir, "log4j2.properties"),
		"-cp", filepath.Join(libs, "*"),
		mainClass,
	}
	return append(jvm, args...)
}

// launch starts the JVM and waits until the broker is ready; on failure the
// process is gone when it returns.
func (k *Kafka) launch(ctx context.Context) error {
	// The broker outlives ctx, so no CommandContext here.
	cmd := exec.Command(k.java, k.javaArgs("kafka.Kafka", filepath.Join(k.dir, "server.properties"))...)
	cmd.Dir = k.dir
	cmd.SysProcAttr = childProcAttr()
	cmd.Stdout = k.log
	cmd.Stderr = k.log
	// Output is copied by goroutines that end when the pipe closes; bound the
	// wait in case something inherited it.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testenv: kafka: start %s: %w", k.java, err)
	}
	p := &brokerProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := k.waitReady(ctx, p); err != nil {
		_ = stopProcess(p, 0)
		return err
	}
	k.proc = p
	return nil
}

// waitReady polls the broker with metadata requests until it answers with
// itself as a broker, the process exits, or ctx ends.
func (k *Kafka) waitReady(ctx context.Context, p *brokerProcess) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.brokerAddr), kgo.DialTimeout(time.Second))
	if err != nil {
		return fmt.Errorf("testenv: kafka: readiness client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		md, err := adm.BrokerMetadata(attempt)
		cancel()
		if err == nil && len(md.Brokers) > 0 {
			return nil
		}
		if err == nil {
			err = errors.New("metadata lists no brokers")
		}
		lastErr = err
		select {
		case <-p.done:
			return fmt.Errorf("testenv: kafka: broker exited before it was ready (%v); log tail:\n%s", p.err, lastLines(k.log.String(), 40))
		case <-ctx.Done():
			return fmt.Errorf("testenv: kafka: broker at %s not ready after %v (last error: %v); log tail:\n%s",
				k.brokerAddr, k.opts.StartTimeout, lastErr, lastLines(k.log.String(), 40))
		case <-tick.C:
		}
	}
}

// stopProcess sends SIGTERM to the process group and waits up to grace for
// the JVM to exit, then kills the group. A zero grace kills at once. Killing
// the group afterwards as well leaves nothing the JVM may have started.
func stopProcess(p *brokerProcess, grace time.Duration) error {
	var graceErr error
	if grace > 0 {
		if err := signalGroup(p.cmd, syscall.SIGTERM); err != nil {
			graceErr = fmt.Errorf("SIGTERM: %w", err)
		} else {
			select {
			case <-p.done:
			case <-time.After(grace):
				graceErr = fmt.Errorf("did not exit within %v of SIGTERM; killed", grace)
			}
		}
	}
	if err := signalGroup(p.cmd, syscall.SIGKILL); err != nil && graceErr == nil {
		graceErr = fmt.Errorf("SIGKILL: %w", err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		return errors.Join(graceErr, errors.New("process did not exit after SIGKILL"))
	}
	return graceErr
}

// Brokers returns the seed addresses, host:port on KafkaOptions.Host.
func (k *Kafka) Brokers() []string {
	return []string{k.brokerAddr}
}

// Client returns a franz-go client seeded with the broker; opts come after
// the seed option and may add to it. The caller closes the client.
func (k *Kafka) Client(opts ...kgo.Opt) (*kgo.Client, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(k.Brokers()...)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("testenv: kafka client: %w", err)
	}
	return cl, nil
}

// CreateTopic creates a topic with replication factor 1 and returns once
// every partition has a leader. An existing topic is an error that matches
// kerr.TopicAlreadyExists with errors.Is.
func (k *Kafka) CreateTopic(ctx context.Context, name string, partitions int32) error {
	cl, err := k.Client()
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	resp, err := adm.CreateTopic(ctx, partitions, 1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("testenv: create topic %q: %w", name, err)
	}
	for {
		md, err := adm.Metadata(ctx, name)
		if err == nil && topicLed(md, name, partitions) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testenv: topic %q created but its partitions have no leader: %w", name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func topicLed(md kadm.Metadata, name string, partitions int32) bool {
	td, ok := md.Topics[name]
	if !ok || td.Err != nil || int32(len(td.Partitions)) != partitions {
		return false
	}
	for _, p := range td.Partitions {
		if p.Err != nil || p.Leader < 0 {
			return false
		}
	}
	return true
}

// Restart stops the broker gracefully and starts it again on the same ports
// and data folder, returning once it is ready. Clients stay usable: they
// see the broker go away and reconnect. If the graceful stop times out the
// broker is killed and left stopped, and Restart returns the error.
func (k *Kafka) Restart(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return ErrKafkaStopped
	}
	if k.proc != nil {
		err := stopProcess(k.proc, k.opts.StopTimeout)
		k.proc = nil
		if err != nil {
			return fmt.Errorf("testenv: kafka restart: stop: %w", err)
		}
	}
	fmt.Fprintf(k.log, "\n===== testenv: broker restarted at %s =====\n", time.Now().Format(time.RFC3339Nano))
	startCtx, cancel := context.WithTimeout(ctx, k.opts.StartTimeout)
	defer cancel()
	if err := k.launch(startCtx); err != nil {
		return fmt.Errorf("testenv: kafka restart: %w", err)
	}
	return nil
}

// Pause stops the broker process but keeps its ports and data, for an
// outage: clients see it down until Restart starts it again.
func (k *Kafka) Pause() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return ErrKafkaStopped
	}
	if k.proc == nil {
		return nil
	}
	err := stopProcess(k.proc, k.opts.StopTimeout)
	k.proc = nil
	fmt.Fprintf(k.log, "\n===== testenv: broker paused at %s =====\n", time.Now().Format(time.RFC3339Nano))
	return wrapIf(err, "testenv: kafka pause")
}

// Stop stops the broker (SIGTERM, then SIGKILL to its process group after
// StopTimeout) and removes its folder. Later calls do nothing.
func (k *Kafka) Stop() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return nil
	}
	k.stopped = true
	var stopErr error
	if k.proc != nil {
		stopErr = stopProcess(k.proc, k.opts.StopTimeout)
		k.proc = nil
	}
	return errors.Join(
		wrapIf(stopErr, "testenv: kafka stop"),
		wrapIf(os.RemoveAll(k.dir), "testenv: kafka stop: remove data"),
	)
}

// Log returns the broker's combined stdout and stderr across restarts, at
// most KafkaOptions.LogLimit bytes (the newest).
func (k *Kafka) Log() string {
	return k.log.String()
}

func wrapIf(err error, what string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// newClusterID returns a random cluster id in Kafka's Uuid format (16 bytes,
// URL-safe base64 without padding). Like Kafka's own generator it avoids a
// leading '-', which the tool's argument parser would take for a flag.
func newClusterID() (string, error) {
	var b [16]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		id := base64.RawURLEncoding.EncodeToString(b[:])
		if !strings.HasPrefix(id, "-") {
			return id, nil
		}
	}
}

// freePorts asks the kernel for n distinct free loopback ports. They are
// released before returning, so another process may take one before the
// broker binds it; the window is the JVM's start time.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
