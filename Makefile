# spikehunt — the two set-up commands are `make demo` and `make test`; both
# install what they need themselves (deps/install.sh, cached in .cache/).
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
# Install locations of the pinned components (SPIKEHUNT_LIBCHDB, KUBEBUILDER_ASSETS, …).
$(foreach kv,$(shell deps/install.sh env 2>/dev/null),$(eval export $(kv)))

.PHONY: all deps deps-demo build install demo eval eval-variants eval-sweep test e2e e2e-cluster e2e-cluster-2 cluster-test vet fmt-check cross manifests bench bench-store bench-store-mode bench-agent bench-ingest bench-kafka bench-detect bench-detect-fleet bench-capture-strategy bench-operator bench-dashboards bench-hardening bench-peers bench-peers-agent bench-peers-ingest bench-peers-detect bench-scale dashboards fuzz clean causes soak
.PHONY: chart-sync helm-lint images deps-images

all: build

deps:                ## everything the tests need (idempotent; seconds when cached)
	deps/install.sh all

deps-demo:           ## only what the demo needs: the embedded ClickHouse engine
	deps/install.sh chdb

deps-images:         ## what make images needs: libchdb.so and mmdebstrap (Debian, root)
	deps/install.sh chdb debian

build:
	@command -v $(GO) >/dev/null || { echo "go not found: install Go 1.26+ (go.mod) (https://go.dev/dl)"; exit 1; }
	$(GO) build -buildvcs=auto -o bin/ ./pipelines/cmd/... ./agents/cmd/...
	$(GO) build -buildvcs=auto -o bin/spikehunt-operator ./operator/cmd

# make install PREFIX=/usr/local [DESTDIR=…]: the three binaries in
# PREFIX/bin and the engine in PREFIX/lib/spikehunt/libchdb.so, where a
# binary looks for it beside itself (internal/store/libchdb.go), so an
# installed spikehunt runs from any directory without SPIKEHUNT_LIBCHDB;
# the dashboards' JSON in PREFIX/share/spikehunt/dashboards, where
# serve-clickhouse --grafana-provisioning finds them outside a checkout.
PREFIX ?= /usr/local
install: deps-demo build ## install bin/spikehunt, spikehunt-agent, spikehunt-operator, libchdb.so and the dashboards under PREFIX (default /usr/local)
	install -d "$(DESTDIR)$(PREFIX)/bin" "$(DESTDIR)$(PREFIX)/lib/spikehunt" "$(DESTDIR)$(PREFIX)/share/spikehunt/dashboards"
	install -m 0755 bin/spikehunt bin/spikehunt-agent bin/spikehunt-operator "$(DESTDIR)$(PREFIX)/bin/"
	install -m 0644 "$(SPIKEHUNT_LIBCHDB)" "$(DESTDIR)$(PREFIX)/lib/spikehunt/libchdb.so"
	install -m 0644 dashboards/grafana/*.json "$(DESTDIR)$(PREFIX)/share/spikehunt/dashboards/"
	@echo "installed in $(DESTDIR)$(PREFIX): bin/spikehunt, bin/spikehunt-agent, bin/spikehunt-operator, lib/spikehunt/libchdb.so, share/spikehunt/dashboards/*.json"

# operator/api's deepcopy code, and the CRDs and the operator's ClusterRole
# in operator/config, from the Go types and their kubebuilder markers. The
# operator/config tests fail when the committed files are stale.
manifests: ## regenerate the operator's generated code and manifests (controller-gen)
	deps/install.sh controller-gen
	$(SPIKEHUNT_CONTROLLER_GEN) object paths=./operator/api/...
	$(SPIKEHUNT_CONTROLLER_GEN) crd rbac:roleName=spikehunt-operator paths=./operator/... \
		output:crd:artifacts:config=operator/config/crd/bases output:rbac:artifacts:config=operator/config/rbac
	$(MAKE) chart-sync

# dashboards/grafana/*.json from the Go definitions in dashboards/ (the
# dashboards test fails when the committed JSON is stale).
dashboards: ## regenerate the Grafana dashboards' JSON (and the chart's copies)
	$(GO) test ./dashboards -run '^TestGenerated$$' -update -count=1
	$(MAKE) chart-sync

# The Helm chart's copies of the operator's CRDs, the Grafana dashboards and
# their provider, and the gateway Collector's config (helm/ tests fail when
# they drift).
chart-sync: ## copy the CRDs, dashboards and gateway config into helm/spikehunt
	rm -f helm/spikehunt/crds/*.yaml helm/spikehunt/files/dashboards/*.json
	cp operator/config/crd/bases/*.yaml helm/spikehunt/crds/
	for f in dashboards/grafana/*.json; do [ -e "$$f" ] && cp "$$f" helm/spikehunt/files/dashboards/; done; true
	cp pipelines/services/otel/config.yaml helm/spikehunt/files/otel/config.yaml
	cp dashboards/provisioning/dashboards/spikehunt.yaml helm/spikehunt/files/provisioning/dashboards/spikehunt.yaml

helm-lint: deps ## helm lint the chart with its defaults and every example values file
	$(SPIKEHUNT_HELM) lint --strict helm/spikehunt
	for f in helm/spikehunt/examples/*.yaml; do $(SPIKEHUNT_HELM) lint --strict helm/spikehunt --values "$$f"; done

# The images (images/ARCHITECTURE.md): the binaries for linux/amd64, then
# spikehunt-images assembles spikehunt, spikehunt-agent and
# spikehunt-operator as OCI archives in .cache/images, named as the chart
# renders them by default (ghcr.io/spikehunt/<repository>:<appVersion>).
# The binaries are rebuilt only when a Go file changed; the builder reuses
# its cached Debian root filesystems and layers.
IMAGES_DIR := $(CURDIR)/.cache/images
export SPIKEHUNT_IMAGES_DIR := $(IMAGES_DIR)
APP_VERSION := $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$$/\1/p' helm/spikehunt/Chart.yaml)
IMAGES_GO_SOURCES := $(shell find agents pipelines operator internal kafkasec images -name '*.go' ! -name '*_test.go' 2>/dev/null) go.mod go.sum
IMAGES_GOFLAGS := -trimpath -buildvcs=false -ldflags='-w -X main.version=$(APP_VERSION)'

$(IMAGES_DIR)/bin/.built: $(IMAGES_GO_SOURCES)
	mkdir -p $(IMAGES_DIR)/bin
	GOOS=linux GOARCH=amd64 CGO_ENABLED=0 $(GO) build $(IMAGES_GOFLAGS) -o $(IMAGES_DIR)/bin/ ./pipelines/cmd/spikehunt ./agents/cmd/spikehunt-agent
	GOOS=linux GOARCH=amd64 CGO_ENABLED=0 $(GO) build $(IMAGES_GOFLAGS) -o $(IMAGES_DIR)/bin/spikehunt-operator ./operator/cmd
	$(GO) build -o $(IMAGES_DIR)/spikehunt-images ./images/cmd/spikehunt-images
	touch $@

images: deps-images ## the three images as OCI archives in .cache/images (prints names, digests, sizes, time)
	@start=$$(date +%s%N); \
	$(MAKE) --no-print-directory $(IMAGES_DIR)/bin/.built; \
	$(IMAGES_DIR)/spikehunt-images --bin $(IMAGES_DIR)/bin --out $(IMAGES_DIR) --cache $(IMAGES_DIR)/cache \
		--revision "$$(git rev-parse HEAD)$$(git diff --quiet HEAD -- 2>/dev/null || echo -dirty)" \
		--source-date-epoch "$$(git log -1 --format=%ct)" $(IMAGES_ARGS); \
	echo "make images: $$(( ($$(date +%s%N) - start) / 1000000 )) ms"

cross:               ## the agent must build for Windows (PDH sampler, WPR captures)
	GOOS=windows GOARCH=amd64 $(GO) build -o /dev/null ./agents/...

demo: deps-demo build ## the main job on the embedded default
	bin/spikehunt demo --dsn "chdb://$(CURDIR)/.cache/demo?database=demo"

# Every simulated scenario at 300 hosts through sim → ingest → detect on the
# embedded engine: recall, precision, class, detection delay, top-1 suspect;
# then the spike rule's sweep (eval-sweep).
eval: deps-demo build
	bin/spikehunt eval --dsn "chdb://$(CURDIR)/.cache/eval"
	$(MAKE) --no-print-directory eval-sweep

# The spike rule on every body and rate: lognormal σ 0.3–1.2 × 1–100
# requests/s per host, and a body of cache hits and misses, each a healthy
# and a stalling fleet of 50 hosts × 3 h (about an hour on two cores):
# false windows per host-hour, precision, and recall of the stalls a
# request saw. docs/detection.md keeps the table.
eval-sweep: deps-demo build
	bin/spikehunt eval --sweep --hosts 50 --duration 3h --dsn "chdb://$(CURDIR)/.cache/eval-sweep"

# The same scores on scenarios away from their defaults: other periods,
# fractions, fleet sizes, spike lengths and noise levels.
eval-variants: deps-demo build
	bin/spikehunt eval --variants --dsn "chdb://$(CURDIR)/.cache/eval-variants"

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); [ -z "$$out" ] || { echo "gofmt needed:"; echo "$$out"; exit 1; }

# The whole suite against real components. TEST_FLAGS adds go test flags.
# Not as root, the images are skipped when their Debian parts are not
# cached (mmdebstrap needs root), and so are their tests. A pinned Debian
# version the mirror has dropped (a security update) is replaced by the
# newest, with a warning, rather than stopping the suite. What tests keep
# for a person to look at (the browser tests' screenshots of each page at
# each width) is in .cache/test-artifacts/_artifacts, one folder per test,
# named in its "=== ARTIFACTS" line and its log.
test: IMAGES_ARGS = --unprivileged skip --missing-pin newest
test: deps fmt-check vet cross images
	mkdir -p .cache
	rm -rf .cache/test-artifacts && mkdir -p .cache/test-artifacts
	$(GO) build -o .cache/testsummary ./tests/testsummary
	$(GO) test -count=1 -timeout 55m -json -artifacts -outputdir $(CURDIR)/.cache/test-artifacts $(TEST_FLAGS) ./... | .cache/testsummary

# The full loop alone (make test runs it too): detector alert on Kafka →
# operator on envtest → Capture → real perf on this machine (root) → S3 →
# captures row linked to the spike. It lives in operator/e2e, where it may
# import the operator's internals (tests/e2e/README.md).
e2e: deps
	SPIKEHUNT_REQUIRE_PRIVILEGED=$${SPIKEHUNT_REQUIRE_PRIVILEGED:-1} $(GO) test -count=1 -v -timeout 10m $(TEST_FLAGS) ./operator/e2e

# The one-node Kubernetes of tests/cluster alone (root): pods from local
# images, Services, cluster DNS, a privileged DaemonSet; make test runs it too.
# SPIKEHUNT_CLUSTER_KEEP_LOGS=1 keeps the components' logs (tests/cluster/README.md).
# The chart installed from the local images into a real one-node cluster
# (tests/cluster), and the whole loop in its pods: an app's stall through
# the agent, Kafka, the ingest and the detector to a Capture the agent's
# perf fires and the operator indexes (tests/e2ecluster). make test runs it
# too. Root.
e2e-cluster: deps images
	SPIKEHUNT_REQUIRE_PRIVILEGED=$${SPIKEHUNT_REQUIRE_PRIVILEGED:-1} $(GO) test -count=1 -v -timeout 20m $(TEST_FLAGS) ./tests/e2ecluster

# The chart across two nodes (tests/cluster's Options.Nodes: a second node
# in its own network and mount namespaces): the agent on both, an alert on
# the second node armed there from the first, the operator's leader killed
# mid-alert, a drain, and the store's node cordoned (tests/e2ecluster's
# twonodes_test.go; the two-node cluster test first). Not part of make test,
# where both skip: about 5 minutes on this 2-core VM. Root.
e2e-cluster-2: deps images ## the chart across two nodes: failover, an alert on the other node, drain (about 5 min; root)
	SPIKEHUNT_E2E_CLUSTER_2=1 SPIKEHUNT_REQUIRE_PRIVILEGED=$${SPIKEHUNT_REQUIRE_PRIVILEGED:-1} $(GO) test -count=1 -v -timeout 10m $(TEST_FLAGS) -run '^TestASecondNode' ./tests/cluster
	SPIKEHUNT_E2E_CLUSTER_2=1 SPIKEHUNT_REQUIRE_PRIVILEGED=$${SPIKEHUNT_REQUIRE_PRIVILEGED:-1} $(GO) test -count=1 -v -timeout 30m $(TEST_FLAGS) -run '^TestTheChartAcrossTwoNodes' ./tests/e2ecluster

cluster-test: deps
	SPIKEHUNT_REQUIRE_PRIVILEGED=$${SPIKEHUNT_REQUIRE_PRIVILEGED:-1} $(GO) test -count=1 -v -timeout 10m $(TEST_FLAGS) ./tests/cluster

# The everyday stall causes induced for real on this machine's kernel
# (root, cgroup v1, perf; about a quarter of an hour), each through the
# agent binary, Kafka, the ingest, the detector, `spikehunt suspects` and
# a perf capture's verdict (docs/causes.md). Not part of make test, where
# tests/causelab skips. SPIKEHUNT_CAUSELAB_CASES=throttle,lock picks cases.
causes: deps
	mkdir -p .cache
	SPIKEHUNT_CAUSELAB=1 SPIKEHUNT_REQUIRE_PRIVILEGED=$${SPIKEHUNT_REQUIRE_PRIVILEGED:-1} $(GO) test -count=1 -v -timeout 40m $(TEST_FLAGS) -run '^TestCauses$$' ./tests/causelab 2>&1 | tee .cache/causes.txt
	@grep '^BENCH' .cache/causes.txt

# The soak: the whole loop (two agent binaries and 1,000 simulated hosts'
# agent output, three KRaft brokers over TLS, the ingest, the store, the
# detector) for SOAK_MINUTES (30) under a schedule of faults, each a named
# step that must recover; prints BENCH soak.* and fails when one misses
# its target (docs/soak.md). Root (tmpfs volumes); not part of make test,
# where tests/soak returns at once. Its log stays in .cache/soak.txt, the
# ingest's heap profiles at the thirds in .cache/soak-artifacts.
SOAK_MINUTES ?= 30
soak: deps ## the soak with faults, SOAK_MINUTES (30) long (docs/soak.md)
	rm -rf .cache/soak-artifacts && mkdir -p .cache/soak-artifacts
	{ SPIKEHUNT_SOAK=1 SOAK_MINUTES=$(SOAK_MINUTES) SPIKEHUNT_REQUIRE_PRIVILEGED=$${SPIKEHUNT_REQUIRE_PRIVILEGED:-1} $(GO) test -count=1 -v \
		-timeout $$(awk 'BEGIN { print int($(SOAK_MINUTES)) + 30 }')m -artifacts -outputdir $(CURDIR)/.cache/soak-artifacts $(TEST_FLAGS) -run '^TestSoak$$' ./tests/soak; echo $$? > .cache/soak.rc; } 2>&1 | tee .cache/soak.txt
	@grep '^BENCH' .cache/soak.txt || true
	@exit $$(cat .cache/soak.rc)

FUZZTIME ?= 30s
FUZZ_TARGETS := ./internal/otlpattr:FuzzParseDecimalIsParseInt ./internal/capture/explain:FuzzParse ./internal/capture/explain:FuzzReadBlockIO ./internal/capture/explain:FuzzReadFtrace ./internal/capture/explain:FuzzReadIrqBlocks ./internal/store:FuzzDecodeNative ./pipelines/services/chhttp:FuzzTranscodeNative ./pipelines/services/chhttp:FuzzDecodeBlocks ./pipelines/services/chhttp:FuzzScanSQL \
	./operator/internal/alertintake:FuzzDecodeDetectorAlert ./operator/internal/alertintake:FuzzDecodeGrafana ./operator/internal/alertintake:FuzzDecodeAlertmanager ./operator/internal/alertintake:FuzzGrafanaSignedRequest ./internal/alertsig:FuzzVerify \
	./agents/intake:FuzzLineProtocol ./agents/intake:FuzzOTLPHTTP ./agents/intake:FuzzScanTraceRequest ./agents/intake:FuzzSpanDecoderMatchesPdata ./agents/intake:FuzzParseCredentials ./agents/intake:FuzzHeaderGuard ./agents/intake:FuzzBearerHeader ./agents/spool:FuzzRecovery \
	./agents/collect:FuzzParseInterrupts ./agents/collect:FuzzParseNetDev ./agents/collect:FuzzParseSoftirqs \
	./agents/collect:FuzzParseVmstat ./agents/collect:FuzzParseNetSNMP ./agents/collect:FuzzParseCgroupCPUStat ./agents/collect:FuzzParseCgroupUsage \
	./agents/collect:FuzzParseCgroupQuota ./agents/collect:FuzzParseCgroupMemoryEvents ./agents/collect:FuzzCgroupDirNames ./agents/podwatch:FuzzReadEvents \
	./pipelines/services/ingest:FuzzAppendTraces ./pipelines/services/ingest:FuzzAppendMetrics ./pipelines/services/ingest:FuzzSpanDecoderMatchesPdata \
	./internal/capture/artifact:FuzzDecodeMetadata ./agents/capture:FuzzDecodeArmRequest ./agents/capture/wpr:FuzzParseWPRLost \
	./agents/capture/ftrace:FuzzParseFtraceLine ./agents/capture/ftrace:FuzzParseRingStats ./agents/capture/bpftrace:FuzzBpftraceFlight \
	./operator/internal/report:FuzzParsePath
fuzz:                ## each fuzz target for FUZZTIME
	for t in $(FUZZ_TARGETS); do $(GO) test $${t%%:*} -run '^$$' -fuzz "^$${t##*:}$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2s; done

bench: bench-store bench-store-mode bench-agent bench-ingest bench-kafka bench-detect bench-detect-fleet bench-capture bench-capture-strategy bench-operator bench-dashboards bench-hardening bench-scale ## every bench-* target

bench-store: deps-demo
	tests/bench.sh store ./internal/store

# The agent for SPIKEHUNT_BENCH_SECONDS (default 30) under 20,000 requests/s
# to a real broker, over the line protocol, then over OTLP/gRPC from the OTel
# SDK (idle, pdata decoder, direct decoder: three agents one after the
# other), the same line load with the cgroup sampler over the 200 workload
# cgroups of a busy node (tests/cgroupfixture, v1 then v2), the OTLP decode
# path alone (direct and pdata in one run), plus one full sampling pass on
# this machine with that 200-cgroup tree (v1 and v2).
# SPIKEHUNT_BENCH_BASELINE_REF=<commit> also runs the 200-cgroup agents built
# from that commit, alternately with this tree's, and prints the ratios.
bench-agent: deps
	BENCHTIME=1x tests/bench.sh agent ./agents/cmd/spikehunt-agent -- -bench '^BenchmarkAgentUnderLoad$$'
	BENCHTIME=1x tests/bench.sh agent-cgroups ./agents/cmd/spikehunt-agent -- -timeout 30m -bench '^BenchmarkAgentUnderLoadWith200Cgroups$$'
	BENCHTIME=1x tests/bench.sh agent-otlp ./agents/cmd/spikehunt-agent -- -bench '^BenchmarkAgentOTLPUnderLoad$$'
	BENCHTIME=500x tests/bench.sh agent-otlp-decode ./agents/intake -- -bench '^BenchmarkOTLP(DecodePath|GRPCExport)$$'
	BENCHTIME=300x tests/bench.sh agent-sample ./agents/collect -- -bench '^BenchmarkSample$$'

# An armed perf flight recorder (default profile) under the test server's
# load, fired five times on a slow request, and the node-side analysis of a
# capture with 30 s of pre-window (root; perf from `make deps`).
bench-capture: deps
	BENCHTIME=1x tests/bench.sh capture ./agents/capture/perf -- -bench 'PerfFlightRecorder|PerfCaptureExplain'

# The operator's capture policy (the sample CapturePolicy's rotation,
# widening and budgets) over simulated fleets of 1,000 and 10,000 hosts
# (SPIKEHUNT_BENCH_HOSTS), three patterns × bait at 1%, 5%, 10%,
# SPIKEHUNT_BENCH_TRIALS fleets each (default 20), on a simulated clock:
# periods from a pattern's detection to each hardware class's first
# indexed capture, and the captures that covered nothing. Pure Go, no
# components; docs/benchmarks.md "Capture strategy, measured".
bench-capture-strategy:
	BENCHTIME=1x tests/bench.sh capture-strategy ./pipelines/lab/eval/capturestrategy -- -bench '^BenchmarkCaptureStrategy$$' -timeout 60m

# One `spikehunt ingest` into the embedded engine over 5,000,000 agent spans
# from 300 hosts (SPIKEHUNT_BENCH_SPANS to change), from a real broker.
bench-ingest: deps
	BENCHTIME=1x tests/bench.sh ingest ./pipelines/cmd/spikehunt -- -bench '^BenchmarkIngest$$'

# The whole chain (agent over TLS, three KRaft brokers with replication
# factor 3 and min.insync.replicas 2, ingest, serve-clickhouse) under 2,000
# requests/s: the pause the partition leader's kill -9 makes, and the one a
# rolling restart of the three makes (docs/kafka.md has the definition).
bench-kafka: deps
	BENCHTIME=1x tests/bench.sh kafka ./tests/kafkacluster -- -bench '^BenchmarkKafka(LeaderFailover|RollingRestart)$$' -timeout 20m

# `spikehunt ingest` against the Collector's kafka receiver → batch →
# clickhouse exporter (into serve-clickhouse) over one topic of 5,000,000
# agent spans (SPIKEHUNT_BENCH_SPANS to change): rows per CPU second of every
# process doing the work, bytes on disk per span, and the ratios.
bench-peers-ingest: deps
	deps/install.sh otelcol-peers
	BENCHTIME=1x tests/bench.sh peers-ingest ./pipelines/cmd/spikehunt -- -bench '^BenchmarkPeersIngest$$' -timeout 90m

# The chart's small install (clickhouse.embedded): serve-clickhouse with its
# users on, fed over HTTP by one ingest from a real broker, for a simulated
# fleet of 300, 1,000 and 3,000 hosts × 5 minutes each, then 30 s at the
# fleet's own rate (one process per
# size, under a minute each): the fleet's rate, the drain rate and headroom,
# the steady CPU, the detector's passes, RSS and disk per host and day.
bench-store-mode: deps
	for h in 300 1000 3000; do SPIKEHUNT_BENCH_HOSTS=$$h SPIKEHUNT_BENCH_MINUTES=5 BENCHTIME=1x tests/bench.sh store-mode-$$h ./pipelines/cmd/spikehunt -- -bench '^BenchmarkStoreMode$$' || exit 1; done

# 5,000 labelled Nodes on envtest and a CapturePolicy sampling 10% of them:
# from creating the policy to all 500 chosen Captures existing, with the
# operator's default client rate (target ≤ 2,000 ms).
bench-operator: deps
	BENCHTIME=1x tests/bench.sh operator ./operator/internal/controller -- -bench '^BenchmarkPolicy5000Nodes$$'
	BENCHTIME=100000x tests/bench.sh operator-alertsig ./internal/alertsig -- -bench '^BenchmarkVerify$$'

# What the bounds of docs/hardening.md cost: the agent's OTLP path per span
# with its pricing walk, the trigger's allow-list per datagram, the RSS the
# issue's gzip bombs cost (four over HTTP, four over gRPC), serve-clickhouse's
# gate on a panel-sized query, a batch with a hundred poison messages found
# by the time window and by splitting, and Kafka export over SASL_SSL beside
# plaintext (one broker, both listeners); and what a real OTLP sender keeps
# of its throughput under a mixed attack on the agent (silent gRPC streams,
# metadata floods, idle connections; SPIKEHUNT_BENCH_SECONDS each, default
# 120).
bench-hardening: deps
	BENCHTIME=200x tests/bench.sh hardening-intake ./agents/intake -- -bench '^Benchmark(OTLPHTTPRequest|ScanTraceRequest|TrustDecide)$$'
	BENCHTIME=3x tests/bench.sh hardening-bombs ./agents/intake -- -bench '^BenchmarkGzipBombs$$'
	BENCHTIME=20x tests/bench.sh hardening-gate ./pipelines/services/chhttp -- -bench '^BenchmarkGate$$'
	BENCHTIME=1x tests/bench.sh hardening-offenders ./pipelines/services/ingest -- -bench '^BenchmarkAHundredOffenders$$'
	BENCHTIME=2s tests/bench.sh hardening-kafka-tls ./agents/export -- -bench '^BenchmarkKafkaSinkPlaintextVsSASLSSL$$'
	BENCHTIME=1x tests/bench.sh hardening-attack ./agents/intake -- -bench '^BenchmarkThroughputUnderAttack$$' -timeout 20m

# spikehunt against what a user would run instead, same load, same machine,
# same Kafka (docs/benchmarks.md); not part of `make bench` or `make test`.
# spikehunt against its peers (docs/benchmarks.md), not part of make bench.
bench-peers: bench-peers-agent bench-peers-ingest bench-peers-detect ## every peers benchmark (docs/benchmarks.md)

# The node agent: spikehunt-agent and the stock Collector as a node agent
# (tests/peers/testdata/collector-node-agent.yaml) in turn under one
# 20,000 spans/s OTLP/gRPC load, SPIKEHUNT_BENCH_SECONDS (default 30) each
# after a warm-up (and idle before it), both to one Kafka broker, then a
# grpc-go server that reads nothing on the same load (the transport's
# floor); then one spikehunt sampling pass against one node_exporter
# scrape of the same kernel sources.
bench-peers-agent: ## spikehunt-agent vs the Collector node agent, and a sampling pass vs node_exporter
	deps/install.sh kafka otelcol-peers node-exporter
	BENCHTIME=1x tests/bench.sh peers-agent ./tests/peers -- -bench '^BenchmarkNodeAgent$$' -timeout 20m
	BENCHTIME=1x tests/bench.sh peers-sample ./tests/peers -- -bench '^BenchmarkSamplingPass$$'

# One detector pass over 24 h × 1,000 hosts of 1 s rollups (loading them
# takes minutes), and the median detection delay over the eval scenarios.
bench-detect: deps-demo
	SPIKEHUNT_BENCH_HOSTS=1000 SPIKEHUNT_BENCH_HOURS=24 BENCHTIME=1x tests/bench.sh detect ./pipelines/services/detect -- -bench '^BenchmarkDetectFullPass$$' -timeout 60m
	SPIKEHUNT_BENCH_HOSTS=1000 SPIKEHUNT_BENCH_HOURS=24 BENCHTIME=1x tests/bench.sh detect-steady ./pipelines/services/detect -- -bench '^BenchmarkDetectSteadyPass$$' -timeout 60m
	SPIKEHUNT_BENCH_HOSTS=1000 SPIKEHUNT_BENCH_HOURS=24 BENCHTIME=1x tests/bench.sh detect-catchup ./pipelines/services/detect -- -bench '^BenchmarkDetectCatchUp$$' -timeout 60m
	BENCHTIME=1x tests/bench.sh detect-delay ./pipelines/lab/eval -- -bench '^BenchmarkDetectionDelay$$' -timeout 60m

# The detector on 10,000 hosts × 7 h (docs/benchmarks.md, "Bounded
# catch-up at 10,000 hosts"): the steady 30 s pass and the catch-up of a
# 1 h outage. Loading the fleet takes most of its time (about 40 minutes on
# two cores); SPIKEHUNT_BENCH_DIR keeps it for the next run.
bench-detect-fleet: deps-demo
	SPIKEHUNT_BENCH_HOSTS=10000 SPIKEHUNT_BENCH_HOURS=7 BENCHTIME=1x tests/bench.sh detect-fleet-steady ./pipelines/services/detect -- -bench '^BenchmarkDetectSteadyPass$$' -timeout 150m
	SPIKEHUNT_BENCH_HOSTS=10000 SPIKEHUNT_BENCH_HOURS=7 BENCHTIME=1x tests/bench.sh detect-fleet-catchup ./pipelines/services/detect -- -bench '^BenchmarkDetectCatchUp$$' -timeout 150m

# Detection against the rules users write today (docs/benchmarks.md): every
# eval scenario and variant once, spikehunt's windows and patterns beside a
# fleet p99 alert, a per-host p99 alert and a MAD outlier rule across hosts,
# all over the same stored requests; a table per run and method, and
# BENCH peers.detect_recall_<method> / _precision_<method> on thousand-spikes.
bench-peers-detect: deps-demo
	BENCHTIME=1x tests/bench.sh peers-detect ./pipelines/lab/eval -- -bench '^BenchmarkPeersDetect$$' -timeout 120m

# How each stage's cost grows with the fleet (docs/benchmarks.md, "Cost as
# the fleet grows"), one process per stage and size: the ingest of 1,000
# spans a host from a real broker into the embedded engine at 1,000, 3,000
# and 10,000 hosts; a detector full pass over 24 h of 1,000 and 3,000
# hosts; a CapturePolicy over 5,000, 15,000 and 50,000 Nodes on envtest.
# Each prints its time and peak memory; tests/scalereport fits the growth
# exponents, extrapolates the sizes not run and names the stage that
# breaks first. The detector at 10,000 hosts (864 M rows to load: about 40
# more minutes on 2 cores) runs with SPIKEHUNT_SCALE_FULL=1. About 30 min
# on 2 cores.
SCALE_INGEST_HOSTS ?= 1000 3000 10000
SCALE_DETECT_HOSTS ?= 1000 3000
SCALE_OPERATOR_NODES ?= 5000 15000 50000
bench-scale: deps
	@start=$$(date +%s); mkdir -p .cache/bench; lines=.cache/bench/scale.lines; : > $$lines; \
	echo "bench-scale on $$(nproc) cores, $$(free -g | awk '/^Mem:/ {print $$2}') GiB; load average at the start: $$(cut -d' ' -f1-3 /proc/loadavg)"; \
	detect="$(SCALE_DETECT_HOSTS)"; skipped=(); \
	if [ -n "$${SPIKEHUNT_SCALE_FULL:-}" ]; then detect="$$detect 10000"; \
	else skipped=(--skipped "detect=10000:not run: a fleet-day of 10,000 hosts is 864 M rows of 1 s rollups and more requests to load, beyond this target's half hour on 2 cores (SPIKEHUNT_SCALE_FULL=1 runs it)"); fi; \
	for h in $(SCALE_INGEST_HOSTS); do SPIKEHUNT_BENCH_HOSTS=$$h BENCHTIME=1x tests/bench.sh scale-ingest-$$h ./pipelines/cmd/spikehunt -- -bench '^BenchmarkScaleIngest$$' -timeout 30m | tee -a $$lines; done; \
	for h in $$detect; do SPIKEHUNT_BENCH_HOSTS=$$h SPIKEHUNT_BENCH_HOURS=24 BENCHTIME=1x tests/bench.sh scale-detect-$$h ./pipelines/services/detect -- -bench '^BenchmarkScaleDetect$$' -timeout 120m | tee -a $$lines; done; \
	for n in $(SCALE_OPERATOR_NODES); do SPIKEHUNT_BENCH_NODES=$$n BENCHTIME=1x tests/bench.sh scale-operator-$$n ./operator/internal/controller -- -bench '^BenchmarkScaleOperator$$' -timeout 30m | tee -a $$lines; done; \
	echo "load average at the end: $$(cut -d' ' -f1-3 /proc/loadavg)"; \
	$(GO) run ./tests/scalereport --want ingest=1000,3000,10000 --want detect=1000,3000,10000 --want operator=5000,15000,50000 "$${skipped[@]}" < $$lines | tee .cache/bench/scale.txt; \
	echo "make bench-scale: $$(( $$(date +%s) - start )) s"

# Every dashboard panel's query over 24 h × 300 hosts on the embedded engine;
# prints the slowest (target ≤ 1,000 ms).
bench-dashboards: deps-demo
	BENCHTIME=1x tests/bench.sh dashboards ./dashboards -- -bench '^BenchmarkPanels$$' -timeout 30m

clean:
	rm -rf bin .cache/demo .cache/bench
