// Command spikehunt-operator runs the operator's controllers in one
// controller-runtime manager: it samples nodes for bait Captures, widens
// them on fleet alerts and indexes what the agents upload (docs/design.md §7).
//
// With --leader-elect, several replicas may run and one acts: the others
// wait on the Lease named by leaderElectionID and take over when it is not
// renewed. The process exits when it loses the lease, as controller-runtime
// requires.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/buildinfo"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlclientconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/spikehunt/spikehunt/internal/alertsig"
	"github.com/spikehunt/spikehunt/internal/flagusage"
	"github.com/spikehunt/spikehunt/internal/memlimit"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/kafkasec"
	capturev1alpha1 "github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/operator/internal/alertintake"
	"github.com/spikehunt/spikehunt/operator/internal/controller"
	"github.com/spikehunt/spikehunt/operator/internal/report"
)

// leaderElectionID names the Lease the replicas compete for.
const leaderElectionID = "operator.spikehunt.io"

// options are the operator's command-line settings.
type options struct {
	metricsAddr             string
	probeAddr               string
	leaderElect             bool
	leaderElectionNamespace string
	kubeQPS                 float64
	kubeBurst               int
	zap                     zap.Options

	// Indexing: the ClickHouse store the captures index lives in.
	dsn        string
	storeWait  time.Duration
	indexRetry time.Duration
	indexWait  time.Duration

	// Alert intake: the detector's Kafka topic and the webhooks.
	kafkaBrokers          string
	kafkaSecurity         *kafkasec.Flags
	alertsTopic           string
	alertsGroup           string
	alertKeysDir          string
	allowUnsigned         bool
	maxSignatureAge       time.Duration
	alertTTL              time.Duration
	maxPendingAlerts      int
	webhookAddr           string
	webhookTLSCert        string
	webhookTLSKey         string
	grafanaSecretFile     string
	alertmanagerTokenFile string
	// The leader's webhook endpoint (webhook_endpoint.go): the slice it
	// writes its pod IP to; empty leaves routing to the caller.
	webhookSlice          string
	webhookSliceNamespace string
	webhookAdvertise      string

	// artifactsConfig is the agents' artifact store configuration (YAML),
	// for deleting artifacts on retention; empty leaves them to the
	// bucket's lifecycle rule.
	artifactsConfig string
	// artifactsDelete: retention deletes through --artifacts.config;
	// false keeps it for the report server's reads alone.
	artifactsDelete bool

	// report is the capture report server (--report.*); off without an
	// address.
	report report.Config
	// reportArtifacts is the opened --artifacts.config as the report
	// server reads it (nil without one).
	reportArtifacts report.Artifacts

	// store is the opened --dsn (nil without one); run opens and closes it.
	store store.Store
	// artifacts is the opened --artifacts.config (nil without one).
	artifacts controller.ArtifactDeleter
	// skipNameValidation lets one process run several managers (tests):
	// controller-runtime refuses a controller name twice otherwise.
	skipNameValidation bool
	// registry takes the intake's metrics; nil is controller-runtime's
	// (served at /metrics). Tests running two replicas give one its own.
	registry prometheus.Registerer
	// memoryLimitRatio is --runtime.memory-limit-ratio (internal/memlimit).
	memoryLimitRatio float64
}

// errUsage marks a command-line mistake, printed already: exit status 2.
var errUsage = errors.New("usage")

func parseFlags(args []string) (options, error) { return parseFlagsTo(args, os.Stderr) }

// parseFlagsTo is parseFlags writing the usage and mistakes to stderr.
func parseFlagsTo(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("spikehunt-operator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, `Usage: spikehunt-operator [flags]

Reconciles CapturePolicy and Capture objects: decides where flight recorders are
armed from the detector's alerts (Kafka, or the Grafana and Alertmanager webhook),
indexes each capture against the spike windows it covers in the store, deletes
expired captures' artifacts, and serves the capture reports.

Flags:`)
		flagusage.Print(fs, stderr)
	}
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus /metrics endpoint; \"0\" turns it off")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz probes")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "compete for the Lease "+leaderElectionID+" so that one replica acts; run every replica with it")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "namespace of the Lease (default: the pod's own namespace)")
	fs.Float64Var(&o.kubeQPS, "kube-api-qps", controller.DefaultClientQPS, "requests per second to the Kubernetes API (a policy's Captures are created in parallel)")
	fs.IntVar(&o.kubeBurst, "kube-api-burst", controller.DefaultClientBurst, "burst of requests to the Kubernetes API")
	fs.StringVar(&o.dsn, "dsn", os.Getenv("SPIKEHUNT_DSN"), "ClickHouse DSN of the store with the spikes and captures tables (chdb://DIR?database=DB for the embedded engine, clickhouse://… for a server; env SPIKEHUNT_DSN, which keeps a password out of the command line); empty turns indexing off")
	fs.DurationVar(&o.storeWait, "store-wait", store.DefaultOpenWait, "at start, how long to wait for a ClickHouse server that cannot be reached yet (0: fail at once)")
	fs.StringVar(&o.artifactsConfig, "artifacts.config", "", "YAML of the agents' artifact store (local.dir, or s3: endpoint, bucket, prefix, and key files or credentials: ambient for the pod's AWS identity), to delete artifacts when captures expire; empty leaves them to the bucket's lifecycle rule")
	fs.BoolVar(&o.artifactsDelete, "artifacts.delete", true, "delete an expired capture's artifact from the --artifacts.config store; false leaves them to the bucket's lifecycle rule while the report server still reads the store")
	fs.DurationVar(&o.indexRetry, "index.retry", controller.DefaultIndexRetry, "how often an uploaded capture no spike overlaps yet is indexed again")
	fs.DurationVar(&o.indexWait, "index.wait", controller.DefaultIndexWait, "how long after a capture's window it is indexed again for late spikes before it is Indexed with none")
	fs.StringVar(&o.kafkaBrokers, "alerts.kafka.brokers", "", "comma-separated Kafka brokers of the detector's alerts topic; empty turns the Kafka intake off")
	fs.StringVar(&o.alertsTopic, "alerts.topic", alertintake.DefaultTopic, "the detector's alerts topic")
	fs.StringVar(&o.alertsGroup, "alerts.kafka.group", alertintake.DefaultGroup, "the consumer group whose committed offsets a restarted operator resumes from")
	o.kafkaSecurity = kafkasec.AddFlags(fs, "alerts.kafka.", kafkasec.Config{})
	fs.StringVar(&o.alertKeysDir, "alerts.keys-dir", "", "folder of the detector's alert signing keys, one file per key named after its id (the mounted Secret); "+
		"records must be signed by one of them. Required with --alerts.kafka.brokers unless --alerts.allow-unsigned")
	fs.BoolVar(&o.allowUnsigned, "alerts.allow-unsigned", false, "accept alert records without a signature: anyone who can write to the topic then widens captures within the budgets. "+
		"Only for a topic nobody untrusted can write to, or while the detector is switched to signing")
	fs.DurationVar(&o.maxSignatureAge, "alerts.max-signature-age", alertsig.DefaultMaxAge, "refuse alert records signed longer ago than this (a backlog after an outage, a replay); 1m–168h")
	fs.DurationVar(&o.alertTTL, "alerts.ttl", controller.DefaultAlertTTL, "how long an alert whose armings the budgets refuse stays pending")
	fs.IntVar(&o.maxPendingAlerts, "alerts.max-pending", controller.DefaultMaxPendingAlerts, "alerts pending per policy; beyond it the oldest are dropped (counted)")
	fs.StringVar(&o.webhookAddr, "webhook.address", alertintake.DefaultAddress, "address of the HTTPS alert webhook (Grafana, Alertmanager)")
	fs.StringVar(&o.webhookTLSCert, "webhook.tls-cert-file", "", "PEM certificate (chain) of the alert webhook")
	fs.StringVar(&o.webhookTLSKey, "webhook.tls-key-file", "", "PEM key of the alert webhook")
	fs.StringVar(&o.grafanaSecretFile, "webhook.grafana-secret-file", "", "file with the Grafana contact point's HMAC secret; enables "+alertintake.DefaultGrafanaPath)
	fs.StringVar(&o.alertmanagerTokenFile, "webhook.alertmanager-token-file", "", "file with the Alertmanager receiver's bearer token; enables "+alertintake.DefaultAlertmanagerPath)
	fs.StringVar(&o.webhookSlice, "webhook.endpointslice", "", "EndpointSlice of the webhook's selector-less Service: the leader writes its own address there while it serves, so that senders reach the leader and never a standby; empty: no slice (route to the leader yourself)")
	fs.StringVar(&o.webhookSliceNamespace, "webhook.endpointslice-namespace", "", "namespace of --webhook.endpointslice (the pod's own)")
	fs.StringVar(&o.webhookAdvertise, "webhook.advertise-address", "", "this pod's IP, written to --webhook.endpointslice when it leads (the downward API's status.podIP)")
	o.report = report.DefaultConfig()
	fs.StringVar(&o.report.Address, "report.address", "", "address of the capture report server, e.g. :8090: GET /captures/{namespace}/{name}/report (the node's report.html) "+
		"and /captures/{namespace}/{name}/files/{file}, which the Grafana Captures dashboard links to; every replica serves it. Empty turns it off. "+
		"Needs --report.users-file and --artifacts.config")
	fs.Func("report.mode", "how a file reaches the browser: proxy (default; the operator reads it from the store, checks its sha256 against the record, and sends it: "+
		"browsers need not reach the store) or redirect (302 to a presigned S3 URL for that one object, valid --report.presign-ttl; S3 stores only, bytes unchecked)",
		func(v string) error { o.report.Mode = report.Mode(v); return nil })
	fs.DurationVar(&o.report.PresignTTL, "report.presign-ttl", report.DefaultPresignTTL, "how long a redirect's presigned URL grants its object (1s–12h); keep it short: anyone holding the URL can GET the object until then")
	fs.StringVar(&o.report.UsersFile, "report.users-file", "", "YAML users file of the report server (the mounted Secret): users with a bcrypt or sha256 password_hash and the namespaces "+
		"whose captures each may open (\"*\": all); the server does not start without it")
	fs.StringVar(&o.report.TLSCertFile, "report.tls-cert-file", "", "PEM certificate (chain) of the report server; without it and --report.tls-key-file it speaks plain HTTP and must sit behind a TLS ingress (basic auth sends the password with every request)")
	fs.StringVar(&o.report.TLSKeyFile, "report.tls-key-file", "", "PEM key of the report server")
	fs.IntVar(&o.report.MaxConnections, "report.max-connections", report.DefaultMaxConnections, "open connections the report server serves at once; a newcomer takes the place of an idle one, or is closed")
	fs.IntVar(&o.report.MaxConnectionsPerPeer, "report.max-connections-per-peer", 0, "open connections of one client IP, below --report.max-connections (default a quarter of it)")
	fs.Int64Var(&o.report.MaxFileBytes, "report.max-file-bytes", report.DefaultMaxFileBytes, "largest file the report server sends in proxy mode (it is read whole and checked first); larger ones are refused with 413: use spikehunt captures get")
	fs.StringVar(&o.report.SpoolDir, "report.spool-dir", "", "folder for files over 1 MiB while proxy mode checks them (default: the system's temporary folder); needs --report.max-connections × --report.max-file-bytes at worst")
	fs.Float64Var(&o.memoryLimitRatio, "runtime.memory-limit-ratio", memlimit.DefaultRatio, "share of the pod's memory limit (its cgroup's) the Go runtime may use before its garbage collector works harder, "+
		"so that a burst of garbage (the first list of every Node) does not reach the limit; 0 turns it off; a GOMEMLIMIT in the environment wins")
	ctrlclientconfig.RegisterFlags(fs) // --kubeconfig, for a run outside the cluster
	o.zap.BindFlags(fs)
	showVersion := fs.Bool("version", false, "print the version and exit")
	// A mistake is one line and where the help is: the usage would scroll
	// it away.
	if err := flagusage.Parse(fs, args, fs.Usage); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return options{}, err
		}
		return options{}, errUsage
	}
	if *showVersion {
		return options{}, errShowVersion
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected argument %q\n", fs.Arg(0))
		return options{}, errUsage
	}
	if err := memlimit.CheckRatio(o.memoryLimitRatio); err != nil {
		return options{}, fmt.Errorf("--runtime.memory-limit-ratio: %w", err)
	}
	if o.webhookSlice != "" {
		// The chart's downward-API values, checked before any connection.
		if _, err := newWebhookEndpoint(nil, o.webhookSliceNamespace, o.webhookSlice, o.webhookAdvertise, o.webhookAddr, logr.Discard()); err != nil {
			return options{}, err
		}
	}
	if o.report.Address != "" {
		if err := o.report.WithDefaults().Validate(); err != nil {
			return options{}, err
		}
		if o.artifactsConfig == "" {
			return options{}, errors.New("--report.address needs --artifacts.config: the report server reads the artifacts from the agents' store")
		}
	}
	if o.kafkaBrokers != "" {
		// Checked here, before any connection, so that a missing key is
		// the first thing the operator says, not a crash loop's last.
		cfg := o.kafkaIntakeConfig()
		if err := cfg.Validate(); err != nil {
			return options{}, err
		}
	}
	return o, nil
}

// kafkaIntakeConfig is the Kafka alert intake the flags describe.
func (o options) kafkaIntakeConfig() alertintake.KafkaConfig {
	return alertintake.KafkaConfig{
		Brokers: strings.Split(o.kafkaBrokers, ","), Topic: o.alertsTopic, Group: o.alertsGroup,
		KeysDir: o.alertKeysDir, AllowUnsigned: o.allowUnsigned, MaxSignatureAge: o.maxSignatureAge,
		Security: o.kafkaSecurity.Config(),
	}
}

// newScheme returns the types the operator reads and writes.
func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := capturev1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// newManager builds the manager with its probes and every controller.
func newManager(cfg *rest.Config, o options) (ctrl.Manager, error) {
	s, err := newScheme()
	if err != nil {
		return nil, fmt.Errorf("scheme: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = float32(o.kubeQPS), o.kubeBurst
	// /metrics and the probes: observability.go, not controller-runtime's
	// servers (turned off here).
	obs, err := newObservabilityServer(o.metricsAddr, o.probeAddr, metrics.Registry,
		map[string]healthz.Checker{"ping": healthz.Ping}, observabilityLimits())
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  s,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        leaderElectionID,
		LeaderElectionNamespace: o.leaderElectionNamespace,
		// The process exits right after losing or giving up the lease, so
		// releasing it on shutdown lets a standby take over at once
		// instead of after the lease duration.
		LeaderElectionReleaseOnCancel: true,
		Controller:                    ctrlconfig.Controller{SkipNameValidation: &o.skipNameValidation},
		Cache:                         controller.CacheOptions(),
	})
	if err != nil {
		obs.close()
		return nil, fmt.Errorf("manager: %w", err)
	}
	if err := mgr.Add(obs); err != nil {
		obs.close()
		return nil, fmt.Errorf("observability server: %w", err)
	}
	if err := registerControllers(mgr, o); err != nil {
		obs.close()
		return nil, err
	}
	return mgr, nil
}

// registerControllers adds the operator's reconcilers to mgr. This is the
// one place a controller is registered: each lives in
// operator/internal/controller, one per concern:
//
//   - capturepolicy: bait and alert armings within the budgets, fed by the
//     alert inbox, which the intake (Kafka, webhooks) offers alerts to;
//   - capture: indexing what the agents upload into o.store, retention.
//
// The intake runs as Runnables that need the leader's lease: a standby's
// inbox has no controller to act on it. So the webhook listens on the
// leader only, and with --webhook.endpointslice the leader alone is the
// webhook Service's endpoint (webhook_endpoint.go).
//
// Artifacts: the capture controller deletes the index row and the Capture;
// deleting the artifact itself (captures/<id>.json and its unreferenced
// objects in the agents' bucket) needs a controller.ArtifactDeleter,
// which no flag configures yet: until then the bucket's lifecycle rule
// expires artifacts.
func registerControllers(mgr ctrl.Manager, o options) error {
	inbox := controller.NewAlertInbox(mgr.GetClient(), controller.AlertInboxConfig{TTL: o.alertTTL, MaxPending: o.maxPendingAlerts})
	if err := (&controller.CapturePolicyReconciler{Alerts: inbox}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("capture policy controller: %w", err)
	}
	if err := (&controller.CaptureReconciler{Store: o.store, Artifacts: o.artifacts, IndexRetry: o.indexRetry, IndexWait: o.indexWait}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("capture controller: %w", err)
	}

	log := slog.New(logr.ToSlogHandler(ctrl.Log.WithName("intake")))
	reg := o.registry
	if reg == nil {
		reg = metrics.Registry
	}
	if o.report.Address != "" {
		srv, err := report.New(o.report, mgr.GetClient(), o.reportArtifacts, slog.New(logr.ToSlogHandler(ctrl.Log.WithName("report"))))
		if err != nil {
			return err
		}
		if err := srv.Register(reg); err != nil {
			srv.Close()
			return fmt.Errorf("report server metrics: %w", err)
		}
		if err := mgr.Add(srv); err != nil {
			srv.Close()
			return fmt.Errorf("report server: %w", err)
		}
	}
	sink := alertintake.PolicySink(inbox.Offer)
	if o.kafkaBrokers != "" {
		consumer, err := alertintake.NewKafkaConsumer(o.kafkaIntakeConfig(), sink, log.With("source", "kafka"))
		if err != nil {
			return err
		}
		if err := consumer.Register(reg); err != nil {
			return fmt.Errorf("kafka intake metrics: %w", err)
		}
		if err := mgr.Add(manager.RunnableFunc(consumer.Run)); err != nil {
			return fmt.Errorf("kafka intake: %w", err)
		}
	}
	if o.grafanaSecretFile != "" || o.alertmanagerTokenFile != "" {
		cfg := alertintake.WebhookConfig{Address: o.webhookAddr, TLSCertFile: o.webhookTLSCert, TLSKeyFile: o.webhookTLSKey}
		if o.grafanaSecretFile != "" {
			cfg.Grafana = &alertintake.GrafanaConfig{Secret: alertintake.SecretSource{File: o.grafanaSecretFile}}
		}
		if o.alertmanagerTokenFile != "" {
			cfg.Alertmanager = &alertintake.AlertmanagerConfig{Token: alertintake.SecretSource{File: o.alertmanagerTokenFile}}
		}
		wh, err := alertintake.NewWebhook(cfg, sink, log.With("source", "webhook"))
		if err != nil {
			return err
		}
		if err := wh.Register(reg); err != nil {
			return fmt.Errorf("webhook intake metrics: %w", err)
		}
		serve := wh.Serve
		if o.webhookSlice != "" {
			c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
			if err != nil {
				return fmt.Errorf("webhook endpoint client: %w", err)
			}
			ep, err := newWebhookEndpoint(c, o.webhookSliceNamespace, o.webhookSlice, o.webhookAdvertise, o.webhookAddr, ctrl.Log.WithName("webhook-endpoint"))
			if err != nil {
				return err
			}
			// Published once the port is bound, withdrawn when serving stops.
			serve = func(ctx context.Context) error {
				ln, err := net.Listen("tcp", o.webhookAddr)
				if err != nil {
					return fmt.Errorf("intake: webhook: %w", err)
				}
				ctx, cancel := context.WithCancel(ctx)
				published := make(chan struct{})
				go func() { defer close(published); ep.run(ctx) }()
				err = wh.ServeListener(ctx, ln)
				cancel()
				<-published
				return err
			}
		}
		if err := mgr.Add(manager.RunnableFunc(serve)); err != nil {
			return fmt.Errorf("webhook intake: %w", err)
		}
	}
	return nil
}

func run(ctx context.Context, args []string) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.zap)))
	if limit, from, err := memlimit.Set(o.memoryLimitRatio); err != nil {
		ctrl.Log.WithName("setup").Error(err, "the Go memory limit is not set")
	} else if limit > 0 {
		ctrl.Log.WithName("setup").Info("Go memory limit set from the cgroup's", "limit_mib", limit>>20, "from", from, "ratio", o.memoryLimitRatio)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubernetes config (in a pod, or --kubeconfig / $KUBECONFIG): %w", err)
	}
	if o.dsn != "" {
		setup := ctrl.Log.WithName("setup")
		st, err := store.OpenWaiting(ctx, o.dsn, o.storeWait, func(err error, left time.Duration) {
			setup.Info("waiting for the store", "left", left.Round(time.Second).String(), "error", err.Error())
		})
		if err != nil {
			return fmt.Errorf("--dsn: %w", err)
		}
		defer st.Close()
		o.store = st
	} else {
		ctrl.Log.WithName("setup").Info("no --dsn: uploaded captures are not indexed")
	}
	if o.artifactsConfig != "" {
		st, err := openArtifactStore(ctx, o.artifactsConfig)
		if err != nil {
			return err
		}
		defer st.Close()
		if o.artifactsDelete {
			o.artifacts = artifactStore{st}
		}
		o.reportArtifacts = reportArtifacts(st)
	} else {
		ctrl.Log.WithName("setup").Info("no --artifacts.config: expired captures' artifacts stay in the store (use the bucket's lifecycle rule)")
	}
	mgr, err := newManager(cfg, o)
	if err != nil {
		return err
	}
	ctrl.Log.WithName("setup").Info("starting", "leaderElect", o.leaderElect, "metrics", o.metricsAddr, "probes", o.probeAddr, "report", o.report.Address)
	return mgr.Start(ctx)
}

// version is the release, stamped by the image build (-ldflags "-X
// main.version=…"); buildinfo.Describe names a hand build.
var version = "dev"

// errShowVersion is parseFlags' answer to --version.
var errShowVersion = errors.New("version")

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:]); err != nil {
		switch {
		case errors.Is(err, errShowVersion):
			fmt.Println("spikehunt-operator", buildinfo.Describe(version))
			os.Exit(0)
		case errors.Is(err, flag.ErrHelp):
			os.Exit(0)
		case errors.Is(err, errUsage):
			fmt.Fprintln(os.Stderr, "run 'spikehunt-operator -h' for help")
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "spikehunt-operator:", err)
		os.Exit(1)
	}
}
