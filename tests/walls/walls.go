// Package walls holds the import rules that each folder's ARCHITECTURE.md
// states in prose, as data, and the check that the module's import graph
// keeps them (walls_test.go runs it over `go list -deps`).
//
// A package of the module that no rule names is itself a violation: a new
// room gets its wall written down here, beside its ARCHITECTURE.md.
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
	Path     string          // module-relative for the module's packages ("agents/intake")
	Imports  []string        // direct imports, module-relative where they are the module's
	Deps     []string        // every transitive dependency, likewise
	Standard map[string]bool // of Imports and Deps: in the standard library
}

// Rule is one room's wall. Patterns end in "/..." for a subtree.
type Rule struct {
	// Pkg is the packages the rule is for.
	Pkg string
	// Own is which of the module's packages they may import directly.
	Own []string
	// Third, when not nil, is which packages outside the module and the
	// standard library they may import directly (nil: any; empty: none).
	Third []string
	// StdlibOnly: every dependency, transitively, is the standard library's.
	StdlibOnly bool
	// NeverDependOn: no dependency, however indirect, matches these.
	NeverDependOn []string
	// Why is the rule's reason, printed with a violation.
	Why string
}

// agentInternals are the agent's packages that only the agent may hold:
// the recorders, samplers and intake run privileged on a node. (The spool
// is not one: the exporter the simulator shares is built on it.)
//
// The capture engine and its recorders are; its artifact stores and
// records (agents/capture/artifact/...) and its control API
// (agents/capture/control) are not: the operator reads the stores and the
// demo drives an agent through its socket.
var agentInternals = append([]string{"agents/collect", "agents/intake", "agents/podwatch", "agents/nodecapture", "agents/cmd/..."}, captureRecorders...)

// captureRecorders are the capture engine and its backends.
var captureRecorders = []string{"agents/capture", "agents/capture/perf", "agents/capture/ftrace", "agents/capture/bpftrace", "agents/capture/wpr", "agents/capture/internal/..."}

// operatorInternals are the operator's controllers and binaries.
var operatorInternals = []string{"operator/internal/...", "operator/cmd/..."}

// Rules are the walls of agents/, pipelines/, operator/, kafkasec/, tests/,
// dashboards/, helm/, images/ and internal/, as their ARCHITECTURE.md files
// state them.
var Rules = []Rule{
	// agents/
	{Pkg: "agents/client", StdlibOnly: true, Why: "apps import it: the standard library only"},
	{Pkg: "agents/telemetry", Own: nil, Why: "the shared types; it imports nothing of ours"},
	{Pkg: "agents/collect", Own: []string{"agents/telemetry"}, Why: "samplers share only telemetry"},
	{Pkg: "agents/intake", Own: []string{"agents/telemetry"}, Why: "the intake shares only telemetry"},
	{Pkg: "agents/spool", Own: []string{"agents/telemetry"}, Why: "the spool shares only telemetry"},
	{Pkg: "agents/capture/artifact/record", StdlibOnly: true, Why: "the artifact's record travels in the control API: the standard library only"},
	{Pkg: "agents/capture/artifact", Own: []string{"agents/capture/artifact/record"}, Why: "the stores: the operator's cmd takes them without the recorders"},
	{Pkg: "agents/capture/control", Own: []string{"agents/capture/artifact/record"}, Third: []string{},
		NeverDependOn: []string{"agents/capture/artifact"},
		Why:           "the control API's wire types and client: the record and the standard library only, so a program that drives an agent holds neither its recorders nor a store client"},
	{Pkg: "agents/capture", Own: []string{"agents/telemetry", "agents/capture/artifact/...", "agents/capture/control", "agents/capture/explain"},
		Why: "the engine knows backends only by its Backend interface; cmd constructs them, and nodecapture drives the engine, not the reverse (explain only for the report.html of a capture without an analysis)"},
	{Pkg: "agents/capture/explain", Own: []string{"agents/capture/artifact/record"}, Third: []string{"google.golang.org/protobuf/encoding/protowire"},
		Why: "the analysis of a trace on the node: text in, verdicts, profiles and the report page out (protowire for pprof); the recorders and captures explain import it, never the reverse"},
	{Pkg: "agents/capture/perf", Own: []string{"agents/capture", "agents/capture/artifact/record", "agents/capture/explain"}, Why: "a backend implements the engine's interfaces and knows no other backend"},
	{Pkg: "agents/capture/ftrace", Own: []string{"agents/capture", "agents/capture/artifact/record", "agents/capture/explain"}, Why: "a backend implements the engine's interfaces and knows no other backend"},
	{Pkg: "agents/capture/bpftrace", Own: []string{"agents/capture", "agents/capture/artifact/record", "agents/capture/explain"}, Why: "a backend implements the engine's interfaces and knows no other backend"},
	{Pkg: "agents/capture/wpr", Own: []string{"agents/capture", "agents/capture/artifact/record"}, Why: "a backend implements the engine's interfaces and knows no other backend"},
	{Pkg: "agents/capture/internal/capturetest", Own: []string{"agents/telemetry"}, Why: "the recorders' test fixture"},
	{Pkg: "agents/export", Own: []string{"agents/spool", "agents/telemetry", "kafkasec"}, Why: "the exporter moves the spool's records to a sink"},
	{Pkg: "agents/nodecapture", Own: []string{"agents/capture", "agents/capture/artifact/...", "agents/capture/control", "operator/api/..."},
		NeverDependOn: []string{"agents/capture/perf", "agents/capture/ftrace", "agents/capture/bpftrace", "agents/capture/wpr"},
		Why:           "the one bridge from the Capture API to the engine; the engine's backends are cmd's to choose"},
	{Pkg: "agents/podwatch", Own: nil, Third: []string{"github.com/prometheus/client_golang/prometheus"},
		Why: "the node's pod names from a list and watch over plain HTTP: no client-go, no scheme; Prometheus for its figures"},
	{Pkg: "agents/cmd/...", Own: []string{"agents/...", "kafkasec"}, Why: "only cmd wires the agent's packages together"},

	// kafkasec/
	{Pkg: "kafkasec", Own: nil, Third: []string{"github.com/twmb/franz-go/..."},
		Why: "every Kafka client of the agent, the pipeline and the operator imports it: the standard library and franz-go only"},

	// pipelines/
	{Pkg: "pipelines/store", Own: nil, Third: []string{"github.com/ClickHouse/ch-go/...", "github.com/ebitengine/purego/..."},
		Why: "every binary that talks to ClickHouse uses it: ch-go, purego and the standard library only"},
	{Pkg: "pipelines/alerts/alertsig", Own: nil, Third: []string{"github.com/twmb/franz-go/..."},
		Why: "the signed bytes, one definition for the detector and the operator"},
	{Pkg: "pipelines/schema", Own: []string{"pipelines/store"}},
	{Pkg: "pipelines/chhttp", Own: []string{"pipelines/store"}},
	{Pkg: "pipelines/report", Own: []string{"pipelines/store"}},
	{Pkg: "pipelines/captures", Own: []string{"pipelines/store"},
		Why: "the captures index, one definition for the operator, the demo and the CLI: it imports only store"},
	{Pkg: "pipelines/detect", Own: []string{"pipelines/store"}, Why: "detect imports only store"},
	{Pkg: "pipelines/ingest", Own: []string{"pipelines/store", "kafkasec"}},
	{Pkg: "pipelines/alerts", Own: []string{"pipelines/alerts/alertsig", "pipelines/detect", "pipelines/store", "kafkasec"}, Why: "alerts uses detect's result types"},
	{Pkg: "pipelines/sim", Own: []string{"pipelines/ingest", "pipelines/store", "agents/export", "agents/telemetry", "kafkasec"},
		Why: "simulated messages are the agent's own encoding, through the in-process source or Kafka"},
	{Pkg: "pipelines/eval", Own: []string{"pipelines/detect", "pipelines/schema", "pipelines/sim", "pipelines/store"}},
	{Pkg: "pipelines/eval/capturestrategy", Own: []string{"operator/policy", "pipelines/alerts", "pipelines/detect", "pipelines/sim"},
		Why: "the capture strategy measured as the demo runs it: the operator's public policy over the simulator's stalls, with the detector's classifier and alerting in process, no store"},
	{Pkg: "pipelines/otel", Own: nil, Why: "tests only"},
	{Pkg: "pipelines/cli", Own: nil, Third: []string{}, StdlibOnly: true,
		Why: "the flag plumbing every spikehunt command shares: the standard library only"},
	{Pkg: "pipelines/cli/query", Own: []string{"pipelines/cli", "pipelines/captures", "pipelines/store"}, Third: []string{"github.com/ClickHouse/ch-go/..."},
		Why: "the query commands read the tables through store, the captures index's conditions through captures, and nothing that writes them"},
	{Pkg: "pipelines/cli/demo", Own: []string{"pipelines/cli", "pipelines/cli/query", "pipelines/cli/artifacts", "pipelines/captures", "pipelines/detect", "pipelines/ingest",
		"pipelines/report", "pipelines/schema", "pipelines/sim", "pipelines/store", "agents/client", "agents/export", "agents/telemetry",
		"agents/capture/control", "operator/policy"},
		Why: "the demo drives the agent as a child process through its control API, never through its recorders; its policy is the operator's public one"},
	{Pkg: "pipelines/cli/artifacts", Own: []string{"pipelines/cli", "pipelines/cli/query", "pipelines/captures", "pipelines/store",
		"agents/capture/artifact", "agents/capture/artifact/record", "agents/capture/explain"},
		Why: "captures get and explain read the artifact store and the analysis the agents write, never their recorders"},
	{Pkg: "pipelines/cmd/...", Own: []string{"pipelines/...", "kafkasec"},
		Why: "the binary keeps the command table and the wiring; the demo (pipelines/cli/demo) is what reaches the agent's control API and the operator's policy"},

	// operator/
	{Pkg: "operator/api/...", Own: nil, Why: "the API types import only apimachinery"},
	{Pkg: "operator/policy", Own: nil, Why: "pure decisions, importable by the demo"},
	{Pkg: "operator/config", Own: nil, Why: "tests only"},
	{Pkg: "operator/e2e", Own: nil, Why: "tests only"},
	{Pkg: "operator/internal/intake", Own: []string{"kafkasec", "operator/policy", "pipelines/alerts/alertsig"},
		Why: "the signature's definition, not the detector behind pipelines/alerts"},
	{Pkg: "operator/internal/controller", Own: []string{"operator/api/...", "operator/policy", "pipelines/captures", "pipelines/store"}},
	{Pkg: "operator/internal/report", Own: []string{"operator/api/...", "agents/capture/artifact/record"},
		Why: "the report server reads artifacts through its own interface, which cmd implements over the store; the record's types only"},
	{Pkg: "operator/cmd/...", Own: []string{"operator/...", "kafkasec", "pipelines/alerts/alertsig", "pipelines/store", "agents/capture/artifact/..."},
		Why: "cmd alone takes the agent's artifact store, not its recorders"},

	// tests/, dashboards/, helm/: test machinery and test-only packages.
	{Pkg: "tests/testenv", Own: []string{"kafkasec", "pipelines/store"}},
	{Pkg: "tests/cluster", Own: []string{"tests/testenv"},
		Why: "the one-node Kubernetes finds its binaries through testenv.Paths; the charts' e2e tests import it, not the reverse"},
	{Pkg: "tests/testsummary", Own: nil},
	{Pkg: "tests/walls", Own: nil},
	{Pkg: "tests/fakeclock", Own: nil, Third: []string{}, Why: "the tests' one fake clock: the standard library only"},
	{Pkg: "tests/growth", Own: nil, Third: []string{}, Why: "bench-scale's fit and memory readings: the standard library only, so any benchmark may take it"},
	{Pkg: "tests/scalereport", Own: []string{"tests/growth"}, Third: []string{}, Why: "bench-scale's report reads BENCH lines, not the stages' code"},
	{Pkg: "tests/e2ecluster", Own: nil, Why: "tests only: the chart on a real node, through its images"},
	{Pkg: "tests/shopapp", Own: nil, Why: "the end-to-end tests' app: none of spikehunt's code"},
	{Pkg: "tests/peers", Own: nil, Why: "benchmarks only: spikehunt's binaries and packages against their peers, from _test.go files"},
	{Pkg: "tests/e2ecluster/shop", Own: []string{"tests/shopapp"}, Why: "the cluster e2e's app: an OTel-instrumented service, none of spikehunt's code"},

	// internal/: leaves every room may import (everyRoom).
	{Pkg: "internal/defaults", Own: nil, Third: []string{}, StdlibOnly: true, Why: "every config.go imports it: the standard library only"},
	{Pkg: "internal/memlimit", Own: nil, Third: []string{}, StdlibOnly: true, Why: "the binaries set the Go runtime's memory limit from their cgroup's with it: the standard library only"},
	{Pkg: "internal/otlpattr", Own: nil, Third: []string{}, StdlibOnly: true, Why: "both direct span decoders (agents/intake, pipelines/ingest) read attributes with it: the standard library only"},
	{Pkg: "dashboards", Own: nil, Why: "the Go definitions of the dashboards; their tests may import more"},
	{Pkg: "helm", Own: nil, Why: "tests only"},

	// images/: build tooling; no binary of the product imports it.
	{Pkg: "images", Own: nil, Third: []string{"github.com/google/go-containerregistry/..."},
		Why: "the image builder assembles files (binaries, libchdb.so, Debian's root filesystems); it imports nothing of ours, and go-containerregistry alone"},
	{Pkg: "images/cmd/...", Own: []string{"images"}, Third: []string{}, Why: "the builder's command drives the images package only"},
}

// everyRoom are the module's leaf packages that any rule's package may
// import besides its Own: they import nothing of ours and nothing outside
// the standard library. (A StdlibOnly package still may not: they are not
// the standard library's.)
var everyRoom = []string{"internal/defaults", "internal/memlimit", "internal/otlpattr"}

// Every package of agents/ and pipelines/ is also held to these.
var (
	agentsNeverDependOn    = []string{"pipelines/...", "operator/internal/...", "operator/cmd/...", "dashboards/...", "helm/...", "tests/..."}
	pipelinesNeverDependOn = append(append([]string{"dashboards/...", "helm/...", "tests/..."}, agentInternals...), operatorInternals...)
	operatorNeverDependOn  = append([]string{"agents/collect", "agents/intake", "agents/spool", "agents/nodecapture", "agents/cmd/...", "agents/capture/control", "pipelines/detect", "pipelines/ingest", "pipelines/sim", "pipelines/cmd/...", "dashboards/...", "helm/...", "tests/..."}, captureRecorders...)
)

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

// own reports whether p, module-relative, is one of the module's packages.
func own(p string) bool {
	return !strings.Contains(strings.SplitN(p, "/", 2)[0], ".") && !isStdlibPath(p)
}

// isStdlibPath is a fallback for paths the graph did not mark: the
// standard library's have no dot in their first element and are not ours.
func isStdlibPath(p string) bool {
	first := strings.SplitN(p, "/", 2)[0]
	switch first {
	case "agents", "pipelines", "operator", "kafkasec", "tests", "dashboards", "helm", "images", "internal":
		return false
	}
	return !strings.Contains(first, ".")
}

// Check returns every violation of rules in graph, sorted; none is a pass.
func Check(graph []Package, rules []Rule) []string {
	var out []string
	for _, p := range graph {
		if !own(p.Path) {
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
		for _, imp := range p.Imports {
			switch {
			case p.Standard[imp]:
			case own(imp):
				if !matchAny(r.Own, imp) && !matchAny(everyRoom, imp) {
					out = append(out, fmt.Sprintf("%s imports %s: not allowed%s", p.Path, imp, why))
				}
			case r.Third != nil && !matchAny(r.Third, imp):
				allowed := strings.Join(r.Third, ", ")
				if allowed == "" {
					allowed = "the standard library"
				}
				out = append(out, fmt.Sprintf("%s imports %s: only %s outside the module%s", p.Path, imp, allowed, why))
			}
		}
		never, neverWhy := r.NeverDependOn, why
		switch {
		case match("agents/...", p.Path):
			never, neverWhy = append(slices.Clone(never), agentsNeverDependOn...), " (the agent ships data; it never opens the store or holds the operator's internals)"
		case match("pipelines/...", p.Path):
			never, neverWhy = append(slices.Clone(never), pipelinesNeverDependOn...), " (the pipeline never holds the agent's recorders, samplers or intake, nor the operator's internals)"
		case match("operator/...", p.Path):
			never, neverWhy = append(slices.Clone(never), operatorNeverDependOn...), " (the operator never execs into a node nor holds the detector or the ingest)"
		}
		for _, d := range p.Deps {
			if r.StdlibOnly && !p.Standard[d] {
				out = append(out, fmt.Sprintf("%s depends on %s: the standard library only%s", p.Path, d, why))
			}
			if own(d) && matchAny(never, d) {
				out = append(out, fmt.Sprintf("%s depends on %s, which it must never hold, even indirectly%s", p.Path, d, neverWhy))
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}
