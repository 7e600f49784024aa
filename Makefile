# spikehunt — the two set-up commands are `make demo` and `make test`; both
# install what they need themselves (deps/install.sh, cached in .cache/).
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
# Install locations of the pinned components (SPIKEHUNT_LIBCHDB, KUBEBUILDER_ASSETS, …).
$(foreach kv,$(shell deps/install.sh env 2>/dev/null),$(eval export $(kv)))

.PHONY: all deps deps-demo build demo test vet fmt-check bench bench-store fuzz clean

all: build

deps:                ## everything the tests need (idempotent; seconds when cached)
	deps/install.sh all

deps-demo:           ## only what the demo needs: the embedded ClickHouse engine
	deps/install.sh chdb

build:
	@command -v $(GO) >/dev/null || { echo "go not found: install Go 1.25+ (https://go.dev/dl)"; exit 1; }
	$(GO) build -o bin/ ./pipelines/cmd/...

demo: deps-demo build ## the main job on the embedded default
	bin/spikehunt demo --dsn "chdb://$(CURDIR)/.cache/demo?database=demo"

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); [ -z "$$out" ] || { echo "gofmt needed:"; echo "$$out"; exit 1; }

# The whole suite against real components. TEST_FLAGS adds go test flags.
test: deps fmt-check vet
	mkdir -p .cache
	$(GO) build -o .cache/testsummary ./tests/testsummary
	$(GO) test -count=1 -timeout 40m -json $(TEST_FLAGS) ./... | .cache/testsummary

FUZZTIME ?= 30s
fuzz:                ## each fuzz target for FUZZTIME
	$(GO) test ./pipelines/store -run '^$$' -fuzz FuzzDecodeNative -fuzztime $(FUZZTIME)
	$(GO) test ./pipelines/chhttp -run '^$$' -fuzz FuzzTranscodeNative -fuzztime $(FUZZTIME)

bench: bench-store   ## every bench-* target

bench-store: deps-demo
	tests/bench.sh store ./pipelines/store

clean:
	rm -rf bin .cache/demo .cache/bench
