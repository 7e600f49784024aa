package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/internal/flagusage"
	"github.com/spikehunt/spikehunt/kafkasec"
)

// parseFlags loads --config, then applies the flags that were given.
func parseFlags(args []string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("spikehunt-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: spikehunt-agent [--config FILE] [flags]\n       spikehunt-agent capture arm|fire|disarm|list|get|wait|backends …\n\nSamples kernel counters, takes per-request latency (OTLP, line protocol) and exports\nboth as OTLP to Kafka or a Collector, spooling to disk while the destination is down.\nFlags override the config file.\n\nFlags:")
		flagusage.Print(fs, stderr)
	}
	def := defaultConfig()
	path := fs.String("config", "", "YAML config file (unknown keys are an error)")
	procfs := fs.String("path.procfs", def.Paths.ProcFS, "procfs mount point (a fixture tree for tests)")
	sysfs := fs.String("path.sysfs", def.Paths.SysFS, "sysfs mount point")
	cgroupfs := fs.String("path.cgroupfs", def.Paths.CgroupFS, "where the cgroup file systems are mounted (v2, or v1's cpu/ and cpuacct/ below it)")
	podNames := fs.Bool("collect.pod-names", false, "name the cgroups of the node's pods from a watch of its pods (default: when in a cluster with $NODE_NAME or resource.node_name; false shows pods by UID)")
	tracefs := fs.String("path.tracefs", def.Paths.TraceFS, "tracefs mount point (captures)")
	sink := fs.String("sink", def.Sink, "where to export: kafka or otlp")
	brokers := fs.String("kafka.brokers", strings.Join(def.Kafka.Brokers, ","), "Kafka bootstrap brokers, comma-separated")
	kafkaSec := kafkasec.AddFlags(fs, "kafka.", def.Kafka.Security)
	otlp := fs.String("otlp.endpoint", "", "OTel Collector OTLP/gRPC endpoint host:port (with --sink otlp)")
	otlpInsecure := fs.Bool("otlp.insecure", false, "plaintext OTLP/gRPC")
	spoolDir := fs.String("spool.dir", def.Spool.Dir, "outage spool directory")
	listen := fs.String("listen", def.Listen, "address for /metrics and /healthz")
	host := fs.String("host-name", "", "host.name (default: the hostname)")
	hw := fs.String("hw-class", "", "spikehunt.hw_class (default: $SPIKEHUNT_HW_CLASS or the node label)")
	lineUDP := fs.String("intake.line-udp", def.Intake.LineUDP, "line protocol UDP address (empty disables)")
	lineUnix := fs.String("intake.line-unix", def.Intake.LineUnix, "line protocol unix datagram socket (empty disables)")
	trigUIDs := fs.String("intake.trigger.uids", "", "uids whose requests on the unix socket may fire captures, comma-separated (root always may; others' requests are data only)")
	trigCIDRs := fs.String("intake.trigger.cidrs", "", "networks whose UDP requests may fire captures, comma-separated (default: none; e.g. the node's pod CIDR)")
	authToken := fs.String("intake.auth.token-file", "", "file of the bearer tokens OTLP senders must show (authorization: Bearer <token>), one per line; required for an OTLP receiver beyond loopback")
	authOpen := fs.Bool("intake.auth.allow-unauthenticated", false, "let receivers that cannot authenticate their senders (OTLP without a token file, line UDP) listen beyond loopback")
	otlpGRPC := fs.String("intake.otlp-grpc", def.Intake.OTLPGRPC, "OTLP/gRPC receiver address, host:port (TraceService; MetricsService and LogsService are answered success and discarded; empty disables)")
	otlpDecoder := fs.String("intake.otlp-decoder", def.Intake.OTLPDecoder, "OTLP protobuf decoder: direct (fast, no garbage) or pdata (the Collector's reference decoder, several times the CPU; to rule the direct one out, or to measure it); both take and refuse the same messages")
	otlpHTTP := fs.String("intake.otlp-http", def.Intake.OTLPHTTP, "OTLP/HTTP receiver address, host:port (POST /v1/traces; /v1/metrics and /v1/logs are answered success and discarded; empty disables)")
	maxProcs := fs.Int("runtime.gomaxprocs", def.Runtime.GoMaxProcs, "GOMAXPROCS; 0 keeps Go's default ($GOMAXPROCS, else the usable CPUs)")
	timerSlack := fs.Duration("runtime.timer-slack", def.Runtime.TimerSlack, "timer slack of the agent's threads (Linux); 0 keeps the kernel's")
	memRatio := fs.Float64("runtime.memory-limit-ratio", def.Runtime.MemoryLimitRatio, "share of the agent's cgroup memory limit the Go runtime may use before its garbage collector works harder; 0 off; a GOMEMLIMIT in the environment wins")
	pprofOn := fs.Bool("debug.pprof", false, "serve /debug/pprof/ on the metrics listener")
	clockOffset := fs.String("debug.clock-offset-file", "", "test only: a file holding a duration added to the wall clock the intake stamps requests with, re-read every second (a node's clock step, for the soak)")
	logLevel := fs.String("log-level", def.LogLevel, "debug, info, warn or error")
	capOn := fs.Bool("capture.enabled", def.Capture.Enabled, "run the flight recorders (spikehunt-agent capture --help)")
	capDir := fs.String("capture.dir", def.Capture.Dir, "volume captures are written to")
	capSock := fs.String("capture.socket", def.Capture.Socket, "capture control socket (root only; empty disables)")
	capBackends := fs.String("capture.backends", strings.Join(def.Capture.Backends, ","), "capture backends to enable")
	capFireEvery := fs.Duration("capture.fire-every", capture.DefaultFireEvery, "a sender (uid or address) gets one more local-trigger fire this often, after its burst")
	capFireBurst := fs.Int("capture.fire-burst", capture.DefaultFireBurst, "local-trigger fires a sender may make at once")
	capScripts := fs.String("capture.script-dir", def.Capture.ScriptDir, "allow-listed bpftrace scripts (an admin's folder)")
	capKube := fs.Bool("capture.kube.enabled", false, "arm this node's Capture objects (default: when in a cluster or --capture.kube.kubeconfig is set)")
	capKubeconfig := fs.String("capture.kube.kubeconfig", "", "kubeconfig for --capture.kube outside the cluster (default: the in-cluster ServiceAccount)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	// A mistake is one line and where the help is: the usage would scroll
	// it away.
	if err := flagusage.Parse(fs, args, fs.Usage); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Config{}, err
		}
		fmt.Fprintln(stderr, "run 'spikehunt-agent -h' for help")
		return Config{}, errUsage
	}
	if *showVersion {
		return Config{}, errShowVersion
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected argument %q\nrun 'spikehunt-agent -h' for help\n", fs.Arg(0))
		return Config{}, errUsage
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return cfg, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	apply := func(name string, fn func()) {
		if set[name] {
			fn()
		}
	}
	apply("path.procfs", func() { cfg.Paths.ProcFS = *procfs })
	apply("path.sysfs", func() { cfg.Paths.SysFS = *sysfs })
	apply("path.cgroupfs", func() { cfg.Paths.CgroupFS = *cgroupfs })
	apply("path.tracefs", func() { cfg.Paths.TraceFS = *tracefs })
	apply("collect.pod-names", func() { cfg.Collect.PodNames.Enabled = podNames })
	apply("sink", func() { cfg.Sink = *sink })
	apply("kafka.brokers", func() { cfg.Kafka.Brokers = strings.Split(*brokers, ",") })
	kafkaSec.Apply(fs, &cfg.Kafka.Security)
	apply("otlp.endpoint", func() { cfg.OTLP.Endpoint = *otlp })
	apply("otlp.insecure", func() { cfg.OTLP.Insecure = *otlpInsecure })
	apply("spool.dir", func() { cfg.Spool.Dir = *spoolDir })
	apply("listen", func() { cfg.Listen = *listen })
	apply("host-name", func() { cfg.Resource.HostName = *host })
	apply("hw-class", func() { cfg.Resource.HWClass = *hw })
	apply("intake.line-udp", func() { cfg.Intake.LineUDP = *lineUDP })
	apply("intake.line-unix", func() { cfg.Intake.LineUnix = *lineUnix })
	var listErr error
	apply("intake.trigger.uids", func() {
		cfg.Intake.Trigger.UIDs = nil
		for _, f := range splitList(*trigUIDs) {
			uid, err := strconv.ParseUint(f, 10, 32)
			if err != nil {
				listErr = fmt.Errorf("--intake.trigger.uids: %q is not a uid (a decimal number)", f)
				return
			}
			cfg.Intake.Trigger.UIDs = append(cfg.Intake.Trigger.UIDs, uint32(uid))
		}
	})
	apply("intake.trigger.cidrs", func() { cfg.Intake.Trigger.CIDRs = splitList(*trigCIDRs) })
	if listErr != nil {
		return cfg, listErr
	}
	apply("intake.auth.token-file", func() { cfg.Intake.Auth.TokenFile = *authToken })
	apply("intake.auth.allow-unauthenticated", func() { cfg.Intake.Auth.AllowUnauthenticated = *authOpen })
	apply("intake.otlp-grpc", func() { cfg.Intake.OTLPGRPC = *otlpGRPC })
	apply("intake.otlp-http", func() { cfg.Intake.OTLPHTTP = *otlpHTTP })
	apply("intake.otlp-decoder", func() { cfg.Intake.OTLPDecoder = *otlpDecoder })
	apply("log-level", func() { cfg.LogLevel = *logLevel })
	apply("runtime.gomaxprocs", func() { cfg.Runtime.GoMaxProcs = *maxProcs })
	apply("runtime.timer-slack", func() { cfg.Runtime.TimerSlack = *timerSlack })
	apply("runtime.memory-limit-ratio", func() { cfg.Runtime.MemoryLimitRatio = *memRatio })
	apply("debug.pprof", func() { cfg.Debug.Pprof = *pprofOn })
	apply("debug.clock-offset-file", func() { cfg.Debug.ClockOffsetFile = *clockOffset })
	apply("capture.enabled", func() { cfg.Capture.Enabled = *capOn })
	apply("capture.dir", func() { cfg.Capture.Dir = *capDir })
	apply("capture.socket", func() { cfg.Capture.Socket = *capSock })
	apply("capture.backends", func() { cfg.Capture.Backends = strings.Split(*capBackends, ",") })
	apply("capture.fire-every", func() { cfg.Capture.FireEvery = *capFireEvery })
	apply("capture.fire-burst", func() { cfg.Capture.FireBurst = *capFireBurst })
	apply("capture.script-dir", func() { cfg.Capture.ScriptDir = *capScripts })
	apply("capture.kube.enabled", func() { cfg.Capture.Kube.Enabled = capKube })
	apply("capture.kube.kubeconfig", func() { cfg.Capture.Kube.Kubeconfig = *capKubeconfig })
	return cfg, nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
