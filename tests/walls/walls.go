// Package walls holds the import rules that each folder's ARCHITECTURE.md
// states in prose, as data, and the check that the module's import graph
// keeps them (walls_test.go runs it over `go list -deps -test`).
//
// Three kinds of data: Folders (one wall per top folder: the third-party
// modules its packages may import and what none of them may ever depend
// on), Rules (one per package or subtree: which of the module's packages
// it may import, from its code and from its tests), and Crossings (the one
// list of imports from one top folder into another, each with its reason).
// A package of the module in a top folder or a package that no wall names
// is itself a violation: a new room gets its wall written down here,
// beside its ARCHITECTURE.md.
package walls

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Module is the module path every rule is relative to.
const Module = "github.com/spikehunt/spikehunt"

// Package is one node of the import graph: its direct imports and all of
// its dependencies, with whether each is in the standard library.
type Package struct {
	Path string // module-relative for the module's packages ("agents/intake")
	// Test: this is the package as its tests build it, its _test.go files'
	// imports included (go list -test's "p [p.test]" and "p_test [p.test]").
	Test     bool
	Imports  []string        // direct imports, module-relative where they are the module's
	Deps     []string        // every transitive dependency, likewise
	Standard map[string]bool // of Imports and Deps: in the standard library
}

// Folder is the wall around one top folder of the module.
type Folder struct {
	// Third is which packages outside the module and the standard library
	// the folder's code may import directly, unless a Rule narrows it
	// (empty: none). Tests may import any module go.mod requires.
	Third []string
	// NeverDependOn: no dependency of the folder's code, however
	// indirect, matches these (the module's packages or third-party ones).
	NeverDependOn []string
	// Why is the wall's reason, printed with a violation.
	Why string
}

// Rule is one room's wall. Patterns end in "/..." for a subtree.
type Rule struct {
	// Pkg is the packages the rule is for.
	Pkg string
	// Own is which of the module's packages in the same top folder, or of
	// the shared leaves (shared), they may import directly. The leaves in
	// everyRoom are allowed to all; an import into another top folder
	// must be in Crossings.
	Own []string
	// TestOwn is what their _test.go files may import besides Own, in the
	// same top folder; the test machinery (testMachinery) is allowed to
	// every test.
	TestOwn []string
	// Third, when not nil, narrows the folder's Third for these packages
	// (empty: the standard library only, directly).
	Third []string
	// StdlibOnly: every dependency, transitively, is the standard library's.
	StdlibOnly bool
	// NeverDependOn: no dependency of their code, however indirect,
	// matches these, besides the folder's.
	NeverDependOn []string
	// Why is the rule's reason, printed with a violation.
	Why string
}

// Crossing is an import from one top folder into another that the walls
// allow: today's edges between the products, and the tests' edges into
// what they exercise. Every one is listed here and nowhere else.
type Crossing struct {
	From string   // the importing packages
	To   []string // what they may import in another top folder
	// TestOnly: only their _test.go files may.
	TestOnly bool
	Why      string
}

// everyRoom are the shared layer's leaves, which every package may import
// besides its Own: they import nothing of ours and nothing outside the
// standard library. A StdlibOnly package still may not: they are not the standard
// library's.
var everyRoom = []string{"internal/buildinfo", "internal/defaults", "internal/flagusage", "internal/memlimit", "internal/otlpattr", "internal/peerconns", "internal/vocab", "internal/workload"}

// shared are the packages that a Rule's Own may name although they are in
// another top folder: the shared layer beneath the products (internal/)
// and the Kafka security settings every client takes.
var shared = []string{"internal/...", "kafkasec"}

// testMachinery are the packages any package's tests may import: tests/'s
// real components, fake clock, readings, app and cgroup tree.
var testMachinery = []string{"tests/testenv", "tests/fakeclock", "tests/growth", "tests/cluster", "tests/shopapp", "tests/cgroupfixture"}

// The agent's packages that only the agent may hold: the recorders,
// samplers and intake run privileged on a node.
var (
	captureRecorders = []string{"agents/capture", "agents/capture/perf", "agents/capture/ftrace", "agents/capture/bpftrace", "agents/capture/wpr", "agents/capture/internal/..."}
	agentInternals   = append([]string{"agents/collect", "agents/intake", "agents/podwatch", "agents/nodecapture", "agents/cmd/..."}, captureRecorders...)
)

// onlyTests are the folders and packages that only _test.go files import.
var onlyTests = []string{"tests/...", "dashboards/...", "helm/...", "operator/e2e", "operator/config", "pipelines/services/otel"}

// Folders are the walls of the module's top folders. A top folder that is
// not here fails the check as soon as it holds a package.
var Folders = map[string]Folder{
	"agents": {
		Third: []string{
			"github.com/prometheus/client_golang/...", "golang.org/x/sys/...", "golang.org/x/net/netutil",
			"go.opentelemetry.io/collector/pdata/...", "google.golang.org/grpc/...", "google.golang.org/genproto/googleapis/rpc/...",
			"google.golang.org/protobuf/...", "github.com/twmb/franz-go/...", "github.com/pierrec/lz4/...",
			"github.com/minio/minio-go/...", "go.yaml.in/yaml/...", "github.com/go-logr/logr",
			"k8s.io/apimachinery/...", "k8s.io/client-go/rest", "k8s.io/client-go/tools/cache", "k8s.io/client-go/tools/clientcmd", "k8s.io/client-go/util/workqueue",
		},
		NeverDependOn: append([]string{
			"pipelines/...", "operator/internal/...", "operator/cmd/...",
			"sigs.k8s.io/controller-runtime/pkg/client/...", "sigs.k8s.io/controller-runtime/pkg/cache/...", "sigs.k8s.io/controller-runtime/pkg/manager/...",
			"k8s.io/client-go/kubernetes/...", "github.com/ClickHouse/...",
		}, onlyTests...),
		Why: "the agent ships data: it never opens the store, holds the operator's internals, a controller-runtime client or client-go's typed clientsets",
	},
	"pipelines": {
		Third: []string{
			"github.com/ClickHouse/ch-go/...", "github.com/ebitengine/purego/...", "github.com/klauspost/compress/...", "github.com/pierrec/lz4/...",
			"github.com/prometheus/client_golang/...", "github.com/twmb/franz-go/...", "go.opentelemetry.io/collector/pdata/...",
			"go.yaml.in/yaml/...", "golang.org/x/net/netutil",
		},
		NeverDependOn: append(append([]string{"operator/internal/...", "operator/cmd/...", "k8s.io/...", "sigs.k8s.io/..."}, agentInternals...), onlyTests...),
		Why:           "the pipeline never holds the agent's recorders, samplers or intake, the operator's internals, or a Kubernetes client",
	},
	"operator": {
		Third: []string{
			"sigs.k8s.io/controller-runtime/...", "k8s.io/client-go/...", "k8s.io/api/...", "k8s.io/apimachinery/...",
			"github.com/go-logr/logr", "github.com/prometheus/client_golang/...", "github.com/twmb/franz-go/...",
			"golang.org/x/net/netutil", "golang.org/x/crypto/bcrypt", "go.yaml.in/yaml/...",
		},
		NeverDependOn: append(append([]string{
			"agents/collect", "agents/intake", "agents/spool", "agents/podwatch", "agents/nodecapture", "agents/cmd/...", "internal/capture/control",
			"pipelines/services/detect", "pipelines/services/ingest", "pipelines/lab/sim", "pipelines/services/alerts", "pipelines/cmd/...",
		}, captureRecorders...), onlyTests...),
		Why: "the operator never execs into a node nor holds the detector, the ingest or the capture engine",
	},
	"kafkasec": {Third: []string{"github.com/twmb/franz-go/..."}, Why: "every Kafka client imports it: the standard library and franz-go only"},
	"internal": {Third: []string{},
		NeverDependOn: append([]string{"agents/...", "pipelines/...", "operator/...", "dashboards/...", "images/...", "kafkasec", "k8s.io/...", "sigs.k8s.io/..."}, onlyTests...),
		Why:           "the shared layer beneath the products: it never holds a product's package, so no arrow runs back up"},
	"images": {Third: []string{"github.com/google/go-containerregistry/..."}, Why: "build tooling: go-containerregistry and the standard library"},
	"tests":  {Third: nil, Why: "test machinery, imported only by _test.go files and test binaries: any module go.mod requires"},
	"dashboards": {Third: []string{}, NeverDependOn: []string{"tests/...", "helm/...", "operator/e2e"},
		Why: "the dashboards' Go definitions take the standard library; their tests read them against the real pipeline"},
	"helm": {Third: []string{}, Why: "tests only: doc.go"},
}

// Rules are the walls of each package, as the ARCHITECTURE.md files state
// them. Cross-folder imports are in Crossings, not here.
var Rules = []Rule{
	// internal/: the shared layer beneath the products. The leaves
	// (everyRoom) take the standard library only; the rest take the
	// leaves, each other as listed, and their own third-party modules.
	{Pkg: "internal/defaults", StdlibOnly: true, Why: "every config.go imports it: the standard library only"},
	{Pkg: "internal/buildinfo", StdlibOnly: true, Why: "every binary's version command names its build with it: the standard library only"},
	{Pkg: "internal/flagusage", StdlibOnly: true, Why: "every binary prints its flags and flag mistakes with it: the standard library only"},
	{Pkg: "internal/memlimit", StdlibOnly: true, Why: "the binaries set the Go runtime's memory limit from their cgroup's with it: the standard library only"},
	{Pkg: "internal/otlpattr", StdlibOnly: true, Why: "both direct span decoders (agents/intake, pipelines/services/ingest) read attributes with it: the standard library only"},
	{Pkg: "internal/peerconns", StdlibOnly: true, Why: "the agent's OTLP servers, the operator's webhook and report server and serve-clickhouse share one per-peer connection gate: the standard library only"},
	{Pkg: "internal/vocab", StdlibOnly: true, Why: "the words every product shares (pattern classes, backends, tables, the data source): the standard library only"},
	{Pkg: "internal/workload", StdlibOnly: true, Why: "the detector and the CLI name a pod's workload with it: the standard library only"},
	{Pkg: "internal/telemetry", Third: []string{"github.com/prometheus/client_golang/..."}, Why: "the agent's data model, which the simulator and the ingest's tests share"},
	{Pkg: "internal/otlpwire", Own: []string{"internal/telemetry"}, Third: []string{"go.opentelemetry.io/collector/pdata/..."},
		Why: "the OTLP bytes agents send, written once for the agent, the simulator and the demo"},
	{Pkg: "internal/otlpwire/spanwalk", Third: []string{}, TestOwn: []string{"internal/otlpwire", "internal/telemetry"},
		Why: "both direct span decoders (agents/intake, pipelines/services/ingest) walk OTLP spans with it: the standard library and otlpattr, no pdata"},
	{Pkg: "internal/capture/artifact/record", StdlibOnly: true, Why: "the artifact's record travels in the control API: the standard library only"},
	{Pkg: "internal/capture/artifact", Own: []string{"internal/capture/artifact/record"}, Third: []string{"github.com/minio/minio-go/..."},
		Why: "the artifact stores: the agent writes them, the operator and the CLI read them, none needs the recorders"},
	{Pkg: "internal/capture/control", Own: []string{"internal/capture/artifact/record"}, Third: []string{},
		NeverDependOn: []string{"internal/capture/artifact"},
		Why:           "the control API's wire types and client: the record and the standard library only, so a program that drives an agent holds neither its recorders nor a store client"},
	{Pkg: "internal/capture/explain", Own: []string{"internal/capture/artifact/record"}, Third: []string{"google.golang.org/protobuf/encoding/protowire"},
		Why: "the analysis of a trace: text in, verdicts, profiles and the report page out (protowire for pprof); the recorders and the CLI import it"},
	{Pkg: "internal/capture/reportpage", Own: []string{"internal/capture/explain", "internal/capture/artifact/record"}, Third: []string{},
		Why: "the capture's self-contained page, drawn from the analysis with the standard library"},
	{Pkg: "internal/store", Third: []string{"github.com/ClickHouse/ch-go/...", "github.com/ebitengine/purego/..."},
		Why: "every binary that talks to ClickHouse uses it: ch-go, purego and the standard library only"},
	{Pkg: "internal/schema", Own: []string{"internal/store"}, Third: []string{"github.com/ClickHouse/ch-go/proto"}, Why: "the store's tables and their migrations"},
	{Pkg: "internal/captures", Own: []string{"internal/store"}, Third: []string{"github.com/ClickHouse/ch-go/proto"}, TestOwn: []string{"internal/schema"},
		Why: "the captures index, one definition for the operator, the demo and the CLI: it imports only store"},
	{Pkg: "internal/alertdoc", StdlibOnly: true,
		Why: "the alert document, one definition for the detector that writes it and the operator that reads it: the standard library only"},
	{Pkg: "internal/alertsig", Third: []string{"github.com/twmb/franz-go/pkg/kgo"},
		Why: "the signed bytes, one definition for the detector and the operator: franz-go's record type only"},
	{Pkg: "internal/policy", Third: []string{}, Why: "the capture decisions, pure, for the operator's controllers, the demo and the evaluation: the standard library only"},

	// agents/
	{Pkg: "agents/client", StdlibOnly: true, TestOwn: []string{"agents/intake", "internal/telemetry"},
		Why: "apps import it: the standard library only (its tests send to the real intake)"},
	{Pkg: "agents/collect", Own: []string{"internal/telemetry"}, Why: "samplers share only telemetry"},
	{Pkg: "agents/intake", Own: []string{"internal/telemetry", "internal/otlpwire/spanwalk"}, Why: "the intake shares only telemetry and the span walk"},
	{Pkg: "agents/spool", Own: []string{"internal/telemetry"}, Why: "the spool shares only telemetry"},
	{Pkg: "agents/capture", Own: []string{"internal/telemetry", "internal/capture/..."},
		Third: []string{"github.com/prometheus/client_golang/...", "golang.org/x/sys/..."},
		Why:   "the engine knows backends only by its Backend interface; cmd constructs them, and nodecapture drives the engine, not the reverse (explain only for the report.html of a capture without an analysis)"},
	{Pkg: "agents/capture/perf", Own: []string{"agents/capture", "internal/capture/artifact/record", "internal/capture/explain", "internal/capture/reportpage"},
		TestOwn: []string{"internal/capture/artifact", "internal/capture/control", "agents/capture/internal/capturetest", "internal/telemetry"},
		Why:     "a backend implements the engine's interfaces and knows no other backend"},
	{Pkg: "agents/capture/ftrace", Own: []string{"agents/capture", "internal/capture/artifact/record", "internal/capture/explain", "internal/capture/reportpage"},
		TestOwn: []string{"internal/capture/control", "agents/capture/internal/capturetest"},
		Why:     "a backend implements the engine's interfaces and knows no other backend"},
	{Pkg: "agents/capture/bpftrace", Own: []string{"agents/capture", "internal/capture/artifact/record", "internal/capture/explain", "internal/capture/reportpage"}, Why: "a backend implements the engine's interfaces and knows no other backend"},
	{Pkg: "agents/capture/wpr", Own: []string{"agents/capture", "internal/capture/artifact/record"}, Why: "a backend implements the engine's interfaces and knows no other backend"},
	{Pkg: "agents/capture/internal/capturetest", Own: []string{"internal/telemetry"}, Why: "the recorders' test fixture"},
	{Pkg: "agents/export", Own: []string{"agents/spool", "internal/telemetry", "internal/otlpwire", "kafkasec"}, Why: "the exporter moves the spool's records to a sink"},
	{Pkg: "agents/selfreport", Own: []string{"agents/capture", "agents/export", "agents/spool", "internal/telemetry"}, Third: []string{},
		Why: "the agent's own figures, read from its parts directly, never from a metrics registry"},
	{Pkg: "agents/podwatch", Third: []string{"github.com/prometheus/client_golang/..."},
		Why: "the node's pod names over plain net/http: no client-go, so the agent stays small"},
	{Pkg: "agents/nodecapture", Own: []string{"agents/capture", "internal/capture/artifact/...", "internal/capture/control"},
		TestOwn:       []string{"agents/capture/perf", "agents/capture/bpftrace", "internal/telemetry"},
		NeverDependOn: []string{"agents/capture/perf", "agents/capture/ftrace", "agents/capture/bpftrace", "agents/capture/wpr"},
		Why:           "the one bridge from the Capture API to the engine; the engine's backends are cmd's to choose"},
	{Pkg: "agents/cmd/...", Own: []string{"agents/...", "internal/telemetry", "internal/capture/...", "internal/otlpwire", "kafkasec"}, Why: "only cmd wires the agent's packages together"},

	// kafkasec/
	{Pkg: "kafkasec", Why: "every Kafka client of the agent, the pipeline and the operator imports it: it imports nothing of ours"},

	// pipelines/services/: the long-running services.
	{Pkg: "pipelines/services/chhttp", Own: []string{"internal/store"}, TestOwn: []string{"internal/schema"}, Why: "serve-clickhouse: the store over HTTP"},
	{Pkg: "pipelines/services/detect", Own: []string{"internal/store", "internal/schema"}, Third: []string{"github.com/ClickHouse/ch-go/proto"},
		Why: "detect reads and writes the store's tables"},
	{Pkg: "pipelines/services/ingest", Own: []string{"internal/store", "internal/schema", "internal/otlpwire/spanwalk", "kafkasec"}, TestOwn: []string{"internal/telemetry", "internal/otlpwire"},
		Why: "Kafka's OTLP into the store's tables"},
	{Pkg: "pipelines/services/alerts", Own: []string{"internal/alertdoc", "internal/alertsig", "pipelines/services/detect", "internal/store", "internal/schema", "kafkasec"},
		Why: "alerts uses detect's result types"},
	{Pkg: "pipelines/services/detectsvc", Own: []string{"pipelines/services/detect", "pipelines/services/alerts", "pipelines/services/ingest", "internal/store", "kafkasec"},
		Why: "the detect service around the passes: their alerts, health and own figures (the ingest's writer of them)"},
	{Pkg: "pipelines/services/storecare", Own: []string{"internal/store", "internal/defaults", "pipelines/services/ingest"}, TestOwn: []string{"internal/schema"},
		Why: "serve-clickhouse's care of its data: the volume, the parts a full disk broke (the ingest's writer of its own figures)"},
	{Pkg: "pipelines/services/otel", TestOwn: []string{"pipelines/services/ingest", "internal/schema", "internal/store"}, Why: "tests only: the gateway Collector's build and config"},

	// pipelines/cli/: the command line and its queries.
	{Pkg: "pipelines/cli", Third: []string{},
		Why: "the flag plumbing every spikehunt command shares: the standard library and internal/flagusage, the binaries' one help style"},
	{Pkg: "pipelines/cli/query", Own: []string{"pipelines/cli", "internal/captures", "internal/store", "internal/schema"}, Third: []string{"github.com/ClickHouse/ch-go/..."},
		Why: "the query commands read the tables through store, the captures index's conditions through captures, and nothing that writes them"},
	{Pkg: "pipelines/cli/artifacts", Own: []string{"pipelines/cli", "pipelines/cli/query", "internal/captures", "internal/store", "internal/schema", "internal/capture/artifact/...", "internal/capture/explain", "internal/capture/reportpage"},
		Why: "captures get and explain read the artifact store and the analysis the agents write, never their recorders"},
	{Pkg: "pipelines/cmd/...", Own: []string{"pipelines/...", "internal/...", "kafkasec"},
		Why: "the binary keeps the command table and the wiring; the demo (pipelines/lab/demo) is what reaches the agent's control API and the operator's policy"},

	// pipelines/lab/: the simulator, the evaluation, the demo and its page.
	{Pkg: "pipelines/lab/sim", Own: []string{"pipelines/services/ingest", "internal/store", "internal/schema", "internal/telemetry", "internal/otlpwire", "kafkasec"},
		Why: "simulated messages are the agent's own encoding, through the in-process source or Kafka"},
	{Pkg: "pipelines/lab/eval", Own: []string{"pipelines/services/detect", "internal/schema", "pipelines/lab/sim", "internal/store"}},
	{Pkg: "pipelines/lab/eval/capturestrategy", Own: []string{"pipelines/services/alerts", "pipelines/services/detect", "pipelines/lab/sim", "internal/policy", "internal/alertdoc"},
		Why: "the capture strategy measured as the demo runs it, with the detector's classifier, alerting and the operator's policy in process, no store"},
	{Pkg: "pipelines/lab/htmlreport", Own: []string{"internal/store", "internal/schema"}, Third: []string{},
		TestOwn: []string{"pipelines/lab/sim", "internal/capture/reportpage", "internal/capture/explain", "internal/capture/artifact/record"},
		Why:     "the demo's HTML page, drawn with the standard library"},
	{Pkg: "pipelines/lab/demo", Own: []string{"pipelines/cli", "pipelines/cli/query", "pipelines/cli/artifacts", "internal/captures", "pipelines/services/detect", "pipelines/services/ingest",
		"pipelines/lab/htmlreport", "internal/schema", "pipelines/lab/sim", "internal/store", "internal/telemetry", "internal/otlpwire", "internal/capture/control", "internal/policy"},
		Why: "the demo drives the agent as a child process through its control API, never through its recorders"},

	// operator/
	{Pkg: "operator/api/...", Third: []string{"k8s.io/apimachinery/...", "sigs.k8s.io/controller-runtime/pkg/scheme"},
		Why: "the API types import only apimachinery and controller-runtime's scheme builder"},
	{Pkg: "operator/config", TestOwn: []string{"operator/api/..."}, Why: "tests only"},
	{Pkg: "operator/e2e", TestOwn: []string{"operator/...", "internal/..."}, Why: "tests only"},
	{Pkg: "operator/internal/alertintake", Own: []string{"internal/alertdoc", "internal/policy", "internal/alertsig", "kafkasec"}, Why: "alerts from Kafka and webhooks, checked with the signature's definition"},
	{Pkg: "operator/internal/controller", Own: []string{"operator/api/...", "internal/policy", "internal/captures", "internal/store"},
		TestOwn: []string{"operator/internal/alertintake", "internal/alertdoc", "internal/alertsig", "internal/schema"}, Why: "one controller per concern; the Capture reconciler indexes captures in the store"},
	{Pkg: "operator/internal/report", Own: []string{"operator/api/...", "internal/capture/artifact/record"},
		TestOwn: []string{"internal/capture/artifact", "internal/capture/reportpage", "internal/capture/explain"},
		Why:     "the report server reads artifacts through its own interface, which cmd implements over the store"},
	{Pkg: "operator/cmd/...", Own: []string{"operator/...", "internal/...", "kafkasec"}, Why: "cmd wires the operator's packages together"},

	// tests/: test machinery and test-only packages.
	{Pkg: "tests/testenv", Own: []string{"kafkasec", "internal/store"}, Why: "real components for tests: a broker with kafkasec's TLS and SASL, the embedded store, an API server"},
	{Pkg: "tests/cluster", Own: []string{"tests/testenv"},
		Why: "the one-node Kubernetes finds its binaries through testenv.Paths; the charts' e2e tests import it, not the reverse"},
	{Pkg: "tests/testsummary", Third: []string{}},
	{Pkg: "tests/walls", Third: []string{}},
	{Pkg: "tests/fakeclock", Third: []string{}, Why: "the tests' one fake clock: the standard library only"},
	{Pkg: "tests/cgroupfixture", Third: []string{}, Why: "the agent's benchmarks' cgroup tree: the standard library only"},
	{Pkg: "tests/fixeddates", Third: []string{}, Why: "the check for fixed dates in the tests of the store and Kafka: the standard library only"},
	{Pkg: "tests/growth", Third: []string{}, Why: "bench-scale's fit and memory readings: the standard library only, so any benchmark may take it"},
	{Pkg: "tests/scalereport", Own: []string{"tests/growth"}, Third: []string{}, Why: "bench-scale's report reads BENCH lines, not the stages' code"},
	{Pkg: "tests/e2ecluster", TestOwn: []string{"internal/store"}, Why: "tests only: the chart on a real node, through its images"},
	{Pkg: "tests/shopapp", Third: []string{"golang.org/x/sys/unix"}, Why: "the end-to-end tests' app: none of spikehunt's code"},
	{Pkg: "tests/causelab", TestOwn: []string{"internal/capture/control", "internal/schema", "internal/store"},
		Why: "make causes only: everyday stall causes through the whole platform on this machine's kernel, from _test.go files"},
	{Pkg: "tests/kafkacluster", TestOwn: []string{"internal/store"},
		Why: "the chain against a replicated Kafka: it runs the agent's and spikehunt's binaries and reads the store, from _test.go files"},
	{Pkg: "tests/soak", TestOwn: []string{"internal/store"},
		Why: "make soak only: the whole loop's binaries under a fault schedule for half an hour, read back from the store, from _test.go files"},
	{Pkg: "tests/ownhosts", Third: []string{},
		Why: "the README's own-hosts commands run for real: it runs the binaries and deploy/kafka.sh as a user does, and imports none of spikehunt's code"},
	{Pkg: "tests/peers", TestOwn: []string{"internal/telemetry", "internal/otlpwire"}, Why: "benchmarks only: spikehunt's binaries and packages against their peers, from _test.go files"},
	{Pkg: "tests/e2ecluster/shop", Own: []string{"tests/shopapp"}, Third: []string{"go.opentelemetry.io/collector/pdata/..."},
		Why: "the cluster e2e's app: an OTel-instrumented service, none of spikehunt's code"},
	{Pkg: "tests/e2ecluster/probe", Third: []string{}, StdlibOnly: true,
		Why: "the cluster e2e's network probe, dialling from a pod's labels: the standard library only"},

	// dashboards/, helm/: Go definitions and tests.
	{Pkg: "dashboards", TestOwn: []string{"internal/store", "internal/schema"}, Why: "the Go definitions of the dashboards; their tests read them against the pipeline (Crossings)"},
	{Pkg: "helm", TestOwn: []string{"internal/store", "internal/capture/artifact"}, Why: "tests only"},

	// images/: build tooling; no binary of the product imports it.
	{Pkg: "images", Why: "the image builder assembles files (binaries, libchdb.so, Debian's root filesystems); it imports nothing of ours"},
	{Pkg: "images/cmd/...", Own: []string{"images"}, Third: []string{}, Why: "the builder's command drives the images package only"},
}

// Crossings are every import from one product (agents/, pipelines/,
// operator/) into another, and every test's import of a product it does
// not belong to, each with its reason. The shared layer (internal/,
// kafkasec) is not a crossing: rules name it in their Own. The test fails
// on a crossing that no import uses any more, so this list only shrinks.
var Crossings = []Crossing{
	// The two documented edges between products (docs/design.md §2).
	{From: "agents/nodecapture", To: []string{"operator/api/v1alpha1"}, Why: "the node's side of the Capture API watches Capture objects"},
	{From: "pipelines/lab/demo", To: []string{"agents/client"}, Why: "the demo's app reports its requests as any app does, through the public client library"},

	// Tests only: a _test.go file exercising what it needs across a wall.
	{From: "internal/store", To: []string{"pipelines/services/chhttp"}, TestOnly: true, Why: "the store client against serve-clickhouse"},
	{From: "agents/cmd/spikehunt-agent", To: []string{"operator/api/v1alpha1"}, TestOnly: true, Why: "the agent's Capture watcher against a real API server"},
	{From: "pipelines/services/ingest", To: []string{"agents/export"}, TestOnly: true, Why: "messages through the agent's own Kafka sink"},
	{From: "operator/internal/controller", To: []string{"pipelines/services/alerts"}, TestOnly: true, Why: "signed alerts through a real broker, as the detector publishes them"},
	{From: "operator/internal/alertintake", To: []string{"pipelines/services/alerts"}, TestOnly: true, Why: "alerts as the detector publishes them"},
	{From: "operator/e2e", To: []string{"agents/capture", "agents/capture/perf", "agents/nodecapture",
		"pipelines/services/alerts", "pipelines/services/detect", "pipelines/services/ingest"}, TestOnly: true,
		Why: "the full loop in one process: the agent's side, the operator's internals and the pipeline"},
	{From: "dashboards", To: []string{"pipelines/services/chhttp", "pipelines/services/detect", "pipelines/services/ingest", "pipelines/lab/sim"}, TestOnly: true,
		Why: "every panel's query on the real engine over a simulated fleet"},
	{From: "helm", To: []string{"operator/api/v1alpha1"}, TestOnly: true,
		Why: "the chart's rendered configs parsed by the code that reads them"},
	{From: "tests/e2ecluster", To: []string{"operator/api/v1alpha1"}, TestOnly: true, Why: "the whole loop on a real node, read back"},
	{From: "tests/causelab", To: []string{"pipelines/cli/query", "pipelines/services/detect", "pipelines/services/ingest"}, TestOnly: true,
		Why: "the cause lab runs the ingest, a detect pass and the CLI's queries in process"},
	{From: "tests/peers", To: []string{"agents/collect"}, TestOnly: true, Why: "the agent's packages against their peers"},
	{From: "tests/soak", To: []string{"pipelines/lab/sim"}, TestOnly: true, Why: "the soak's fleet of 1,000 hosts is the simulator's agent output, produced to Kafka minute by minute"},
}

// match reports whether module-relative path p is matched by pattern.
func match(pattern, p string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == pattern
}

func matchAny(patterns []string, p string) bool {
	return slices.ContainsFunc(patterns, func(pat string) bool { return match(pat, p) })
}

// top is the top folder of module-relative path p.
func top(p string) string { return strings.SplitN(p, "/", 2)[0] }

// own reports whether p is one of the module's packages: the graph
// relativizes the module's paths, and every other path is either the
// standard library's (marked) or a module path, whose first element has a
// dot. No list of folder names: a new top folder is the module's too.
func own(p string, standard map[string]bool) bool {
	return !standard[p] && !strings.Contains(top(p), ".")
}

// crosses reports whether a crossing allows from to import to.
func crosses(crossings []Crossing, from, to string, test bool) bool {
	for _, c := range crossings {
		if match(c.From, from) && matchAny(c.To, to) && (test || !c.TestOnly) {
			return true
		}
	}
	return false
}

// Check returns every violation of the walls in graph, sorted; none is a
// pass.
func Check(graph []Package, folders map[string]Folder, rules []Rule, crossings []Crossing) []string {
	var out []string
	for _, p := range graph {
		if !own(p.Path, p.Standard) {
			continue
		}
		f, ok := folders[top(p.Path)]
		if !ok {
			out = append(out, fmt.Sprintf("%s: top folder %s/ has no wall: add it to walls.Folders (and write its ARCHITECTURE.md)", p.Path, top(p.Path)))
			continue
		}
		var r *Rule
		for i := range rules {
			if match(rules[i].Pkg, p.Path) {
				r = &rules[i]
				break
			}
		}
		if r == nil {
			out = append(out, fmt.Sprintf("%s: no rule names this package: add its wall to tests/walls (and its folder's ARCHITECTURE.md)", p.Path))
			continue
		}
		why := ""
		if r.Why != "" {
			why = " (" + r.Why + ")"
		}
		from := "imports"
		if p.Test {
			from = "imports in a _test.go file"
		}
		for _, imp := range p.Imports {
			switch {
			case p.Standard[imp]:
			case own(imp, p.Standard):
				ok := imp == p.Path || matchAny(r.Own, imp) || matchAny(everyRoom, imp) || crosses(crossings, p.Path, imp, p.Test) ||
					(p.Test && (matchAny(r.TestOwn, imp) || matchAny(testMachinery, imp)))
				if !ok {
					out = append(out, fmt.Sprintf("%s %s %s: not allowed%s", p.Path, from, imp, why))
				}
			case p.Test:
				// Tests may take any module go.mod requires.
			default:
				third := f.Third
				if r.Third != nil {
					third = r.Third
				}
				if third != nil && !matchAny(third, imp) {
					allowed := strings.Join(third, ", ")
					if allowed == "" {
						allowed = "the standard library"
					}
					out = append(out, fmt.Sprintf("%s imports %s: only %s outside the module%s", p.Path, imp, allowed, why))
				}
			}
		}
		if p.Test {
			// A test's dependencies are its imports' own: each import is
			// checked above, and what it brings is checked at its package.
			continue
		}
		never := append(slices.Clone(r.NeverDependOn), f.NeverDependOn...)
		for _, d := range p.Deps {
			if r.StdlibOnly && !p.Standard[d] {
				out = append(out, fmt.Sprintf("%s depends on %s: the standard library only%s", p.Path, d, why))
			}
			if matchAny(never, d) {
				neverWhy := why
				if !matchAny(r.NeverDependOn, d) {
					neverWhy = " (" + f.Why + ")"
				}
				out = append(out, fmt.Sprintf("%s depends on %s, which it must never hold, even indirectly%s", p.Path, d, neverWhy))
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// Unused returns the crossings that no edge of graph takes: a stale
// exception, to delete once the edge is gone.
func Unused(graph []Package, crossings []Crossing) []string {
	used := map[string]bool{}
	for _, p := range graph {
		for _, imp := range p.Imports {
			for _, c := range crossings {
				if match(c.From, p.Path) && (p.Test || !c.TestOnly) {
					for _, to := range c.To {
						if match(to, imp) {
							used[c.From+" → "+to] = true
						}
					}
				}
			}
		}
	}
	var out []string
	for _, c := range crossings {
		for _, to := range c.To {
			if k := c.From + " → " + to; !used[k] {
				out = append(out, k)
			}
		}
	}
	return out
}
