#!/usr/bin/env bash
# Installs the real components spikehunt runs against into an ignored cache
# folder. Idempotent: each component leaves a stamp naming its pinned version,
# and a second run with every stamp present only checks the stamps.
#
#   deps/install.sh [all|chdb|kafka|s3proxy|envtest|kube-node|kube-network-policies|helm|controller-gen|otelcol|otelcol-peers|node-exporter|grafana-schema|chclients|debian|tracefs ...]
#   deps/install.sh env      # print the install locations as shell variables
#
# Versions live in deps/versions.env and nowhere else.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=versions.env
source "$root/deps/versions.env"
cache=${SPIKEHUNT_CACHE:-$root/.cache/deps}

chdb_dir=$cache/chdb/$CHDB_VERSION
kafka_dir=$cache/kafka/$KAFKA_VERSION
s3proxy_dir=$cache/s3proxy/$S3PROXY_VERSION
envtest_dir=$cache/envtest/k8s-$KUBERNETES_VERSION-etcd-$ETCD_VERSION
kube_node_dir=$cache/kube-node/$KUBERNETES_VERSION
knp_dir=$cache/kube-network-policies/$KUBE_NETWORK_POLICIES_VERSION
helm_dir=$cache/helm/$HELM_VERSION
controller_gen_dir=$cache/controller-gen/$CONTROLLER_TOOLS_VERSION
# One folder per manifest: a branch that adds a component builds beside the
# Collector the others use instead of replacing it under them.
otelcol_manifest=$root/pipelines/services/otel/builder-config.yaml
otelcol_dir=$cache/otelcol/$OTELCOL_VERSION-$(sha256sum "$otelcol_manifest" | cut -c1-12)
otelcol_builder=$cache/otelcol/builder-$OTELCOL_VERSION
# The stock Collector spikehunt's peer benchmarks measure against (not shipped).
peers_otelcol_manifest=$root/pipelines/services/otel/peers-builder-config.yaml
peers_otelcol_dir=$cache/otelcol/peers-$PEERS_OTELCOL_VERSION-$(sha256sum "$peers_otelcol_manifest" | cut -c1-12)
peers_otelcol_builder=$cache/otelcol/builder-$PEERS_OTELCOL_VERSION
node_exporter_dir=$cache/node-exporter/$NODE_EXPORTER_VERSION
grafana_schema_dir=$cache/grafana-schema/$GRAFANA_SCHEMA_VERSION-ts$TYPESCRIPT_VERSION
chclients_dir=$cache/chclients/py$CLICKHOUSE_CONNECT_VERSION-js$CLICKHOUSE_JS_VERSION-java$CLICKHOUSE_JAVA_VERSION

# Temporary folders, removed when the script ends however it ends.
scratch=()
trap 'rm -rf "${scratch[@]}"' EXIT

say() { printf 'deps: %s\n' "$*" >&2; }
die() { printf 'deps: %s\n' "$*" >&2; exit 1; }
need() { # need TOOL "what to install"
	command -v "$1" >/dev/null 2>&1 || die "$1 not found: install $2, then re-run make deps"
}
stamped() { [ -f "$1/.installed" ] && [ "$(cat "$1/.installed")" = "$2" ]; }
stamp() { printf '%s' "$2" >"$1/.installed"; }

print_env() {
	cat <<EOF
SPIKEHUNT_LIBCHDB=$chdb_dir/libchdb.so
SPIKEHUNT_KAFKA_LIBS=$kafka_dir/libs
SPIKEHUNT_S3PROXY_LIBS=$s3proxy_dir/libs
KUBEBUILDER_ASSETS=$envtest_dir
SPIKEHUNT_KUBE_NODE=$kube_node_dir
SPIKEHUNT_KUBE_NETWORK_POLICIES=$knp_dir/kube-network-policies
SPIKEHUNT_HELM=$helm_dir/helm
SPIKEHUNT_CONTROLLER_GEN=$controller_gen_dir/controller-gen
SPIKEHUNT_OTELCOL=$otelcol_dir/spikehunt-otelcol
SPIKEHUNT_PEERS_OTELCOL=$peers_otelcol_dir/peers-otelcol
SPIKEHUNT_NODE_EXPORTER=$node_exporter_dir/node_exporter
SPIKEHUNT_GRAFANA_SCHEMA=$grafana_schema_dir
SPIKEHUNT_CHCLIENTS=$chclients_dir
EOF
}

install_chdb() {
	local want="$CHDB_NPM_PACKAGE@$CHDB_VERSION $CHDB_INTEGRITY"
	stamped "$chdb_dir" "$want" && return
	need npm "Node.js with npm (Debian: apt-get install npm)"
	say "fetching $CHDB_NPM_PACKAGE@$CHDB_VERSION (ClickHouse engine, ~150 MB download, ~570 MB unpacked)"
	local tmp
	tmp=$(mktemp -d "$cache/chdb.XXXXXX")
	scratch+=("$tmp")
	(cd "$tmp" && npm pack --silent "$CHDB_NPM_PACKAGE@$CHDB_VERSION" >/dev/null 2>"$tmp/npm.log") ||
		die "npm pack $CHDB_NPM_PACKAGE@$CHDB_VERSION failed: $(tail -n 3 "$tmp/npm.log" | tr '\n' ' ')"
	local tgz got
	tgz=$(ls "$tmp"/*.tgz)
	got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
	[ "$got" = "$CHDB_INTEGRITY" ] || die "checksum mismatch for $tgz: registry publishes $CHDB_INTEGRITY, got $got"
	tar -xzf "$tgz" -C "$tmp" package/libchdb.so
	mkdir -p "$chdb_dir"
	mv "$tmp/package/libchdb.so" "$chdb_dir/libchdb.so"
	stamp "$chdb_dir" "$want"
	say "libchdb.so -> $chdb_dir"
}

install_kafka() {
	local want="kafka_$KAFKA_SCALA:$KAFKA_VERSION slf4j-reload4j:$SLF4J_RELOAD4J_VERSION"
	stamped "$kafka_dir" "$want" && return
	need java "a Java 17+ runtime (Debian: apt-get install openjdk-17-jre-headless)"
	need mvn "Maven (Debian: apt-get install maven)"
	say "fetching Kafka $KAFKA_VERSION jars from Maven Central"
	local tmp
	tmp=$(mktemp -d "$cache/kafka.XXXXXX")
	scratch+=("$tmp")
	cat >"$tmp/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.spikehunt.deps</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_$KAFKA_SCALA</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>$SLF4J_RELOAD4J_VERSION</version></dependency>
  </dependencies>
</project>
EOF
	# -C: fail on a checksum mismatch against the repository's published .sha1.
	(cd "$tmp" && mvn -q -B -C dependency:copy-dependencies -DoutputDirectory="$tmp/libs" >"$tmp/mvn.log" 2>&1) ||
		die "mvn could not fetch the Kafka jars: $(grep -m1 ERROR "$tmp/mvn.log" || tail -n 1 "$tmp/mvn.log")"
	mkdir -p "$kafka_dir"
	rm -rf "$kafka_dir/libs"
	mv "$tmp/libs" "$kafka_dir/libs"
	stamp "$kafka_dir" "$want"
	say "kafka jars -> $kafka_dir/libs ($(ls "$kafka_dir/libs" | wc -l) jars)"
}

# s3proxy is published as a plain jar: its dependencies (jclouds, Jetty,
# logback...) come as separate jars, and tests run it as
# java -cp 'libs/*' org.gaul.s3proxy.Main --properties FILE.
install_s3proxy() {
	local want="s3proxy:$S3PROXY_VERSION"
	stamped "$s3proxy_dir" "$want" && return
	need java "a Java 17+ runtime (Debian: apt-get install openjdk-17-jre-headless)"
	need mvn "Maven (Debian: apt-get install maven)"
	say "fetching s3proxy $S3PROXY_VERSION and its dependencies from Maven Central (~45 MB)"
	local tmp
	tmp=$(mktemp -d "$cache/s3proxy.XXXXXX")
	scratch+=("$tmp")
	cat >"$tmp/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.spikehunt.deps</groupId>
  <artifactId>s3proxy</artifactId>
  <version>1</version>
  <dependencies>
    <dependency><groupId>org.gaul</groupId><artifactId>s3proxy</artifactId><version>$S3PROXY_VERSION</version></dependency>
  </dependencies>
</project>
EOF
	(cd "$tmp" && mvn -q -B -C dependency:copy-dependencies -DoutputDirectory="$tmp/libs" >"$tmp/mvn.log" 2>&1) ||
		die "mvn could not fetch the s3proxy jars: $(grep -m1 ERROR "$tmp/mvn.log" || tail -n 1 "$tmp/mvn.log")"
	[ -f "$tmp/libs/s3proxy-$S3PROXY_VERSION.jar" ] || die "mvn fetched no s3proxy-$S3PROXY_VERSION.jar (log: $tmp/mvn.log)"
	mkdir -p "$s3proxy_dir"
	rm -rf "$s3proxy_dir/libs"
	mv "$tmp/libs" "$s3proxy_dir/libs"
	stamp "$s3proxy_dir" "$want"
	say "s3proxy jars -> $s3proxy_dir/libs ($(ls "$s3proxy_dir/libs" | wc -l) jars)"
}

# build_go_main MODDIR OUT PKG REQUIRE... : builds a main package of a module that
# cannot be `go install`ed (replace directives) inside a throw-away module.
build_go_main() {
	local moddir=$1 out=$2 pkg=$3
	shift 3
	(
		cd "$moddir"
		export GOFLAGS=-mod=mod
		for r in "$@"; do go get "$r" >>build.log 2>&1 || { tail -n 5 build.log >&2; exit 1; }; done
		go build -trimpath ${BUILD_LDFLAGS:+-ldflags="$BUILD_LDFLAGS"} -o "$out" "$pkg" >>build.log 2>&1 || { tail -n 20 build.log >&2; exit 1; }
	) || die "building $pkg failed (log: $moddir/build.log)"
}

# kubernetes_module DIR NAME: a throw-away module requiring k8s.io/kubernetes at
# the pinned version. The module's own go.mod points each staging module
# (k8s.io/api, k8s.io/client-go, ...) at ./staging/src, which only exists in its
# git tree: each becomes k8s.io/X v0.<minor>.<patch>. kube-apiserver and the node
# binaries use identical requirements, so the Go build cache compiles their
# shared packages once.
# kube_ldflags stamps the Kubernetes binaries with their version, as the
# project's release build does (hack/lib/version.sh): without it they
# report v0.0.0-master, which Helm's kubeVersion check of the chart
# refuses. Linking only: the Go cache's compiled packages are reused.
kube_ldflags() {
	local v=k8s.io/component-base/version minor=${KUBERNETES_VERSION#*.}
	minor=${minor%%.*}
	printf -- '-X %s.gitVersion=v%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean -X %s.buildDate=1970-01-01T00:00:00Z' \
		"$v" "$KUBERNETES_VERSION" "$v" "${KUBERNETES_VERSION%%.*}" "$v" "$minor" "$v" "$v"
}

kubernetes_module() {
	local m=$1 name=$2 gomod
	mkdir -p "$m"
	gomod=$(go mod download -json "k8s.io/kubernetes@v$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
	[ -f "$gomod" ] || die "could not download k8s.io/kubernetes@v$KUBERNETES_VERSION from the Go module proxy"
	{
		printf 'module spikehunt.invalid/deps/%s\n\ngo 1.24\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' "$name" "$KUBERNETES_VERSION"
		sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/src/.*#\1#p' "$gomod" |
			while read -r mod; do printf '\t%s => %s v0.%s\n' "$mod" "$mod" "${KUBERNETES_VERSION#1.}"; done
		printf ')\n'
	} >"$m/go.mod"
}

install_envtest() {
	local want="kube-apiserver $KUBERNETES_VERSION (versioned) etcd $ETCD_VERSION"
	stamped "$envtest_dir" "$want" && return
	need go "Go 1.24+ (https://go.dev/dl)"
	mkdir -p "$envtest_dir" "$cache/build"
	if [ ! -x "$envtest_dir/etcd" ]; then
		say "building etcd $ETCD_VERSION (~30 s)"
		local m=$cache/build/etcd-$ETCD_VERSION
		mkdir -p "$m"
		printf 'module spikehunt.invalid/deps/etcd\n\ngo 1.24\n' >"$m/go.mod"
		build_go_main "$m" "$envtest_dir/etcd" go.etcd.io/etcd/server/v3 "go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
	fi
	if [ ! -x "$envtest_dir/kube-apiserver" ] || ! "$envtest_dir/kube-apiserver" --version 2>/dev/null | grep -qx "Kubernetes v$KUBERNETES_VERSION"; then
		say "building kube-apiserver $KUBERNETES_VERSION (~6 min cold on 2 cores, seconds when the Go cache is warm)"
		local m=$cache/build/kube-apiserver-$KUBERNETES_VERSION
		kubernetes_module "$m" kubeapiserver
		BUILD_LDFLAGS=$(kube_ldflags) build_go_main "$m" "$envtest_dir/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver \
			"k8s.io/kubernetes/cmd/kube-apiserver@v$KUBERNETES_VERSION"
	fi
	stamp "$envtest_dir" "$want"
	say "kube-apiserver, etcd -> $envtest_dir"
}

# The node half of tests/cluster's one-node Kubernetes: kubelet,
# kube-controller-manager, kube-scheduler and kube-proxy (and kubectl, which
# tests/e2ecluster runs the README's install block with) from the same module as
# kube-apiserver, built by ONE go build (each shared package compiles once, and
# the Go cache already holds what kube-apiserver compiled), plus the pause
# container compiled statically from the module's build/pause/linux/pause.c
# (tests/cluster packs it into an OCI image), and CoreDNS, which tests/cluster
# runs on the host as the cluster's DNS. The container runtime and CNI
# plugins are Debian packages (install_node_debian).
install_kube_node() {
	local want="kube-node $KUBERNETES_VERSION (versioned, kubectl) pause $PAUSE_VERSION coredns $COREDNS_VERSION"
	install_node_debian
	stamped "$kube_node_dir" "$want" || {
		need go "Go 1.24+ (https://go.dev/dl)"
		need gcc "a C compiler with static libc (Debian: apt-get install gcc libc6-dev)"
		local m=$cache/build/kube-node-$KUBERNETES_VERSION t0
		kubernetes_module "$m" kubenode
		say "building kubelet, kube-controller-manager, kube-scheduler, kube-proxy, kubectl $KUBERNETES_VERSION (~6 min on 2 busy cores even with kube-apiserver's packages cached, ~15 s when the Go cache is warm)"
		t0=$(date +%s)
		mkdir -p "$kube_node_dir"
		(
			cd "$m"
			export GOFLAGS=-mod=mod
			go get "k8s.io/kubernetes@v$KUBERNETES_VERSION" >build.log 2>&1 || { tail -n 5 build.log >&2; exit 1; }
			go build -trimpath -ldflags="$(kube_ldflags)" -o "$kube_node_dir/" k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-controller-manager \
				k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl >>build.log 2>&1 || { tail -n 20 build.log >&2; exit 1; }
		) || die "building the Kubernetes node binaries failed (log: $m/build.log)"
		say "node binaries built in $(($(date +%s) - t0)) s"
		local src
		src=$(go mod download -json "k8s.io/kubernetes@v$KUBERNETES_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')/build/pause/linux/pause.c
		[ -f "$src" ] || die "no $src in the k8s.io/kubernetes module"
		gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION-spikehunt" -o "$kube_node_dir/pause" "$src" ||
			die "gcc could not build pause statically from $src (Debian: apt-get install libc6-dev)"
		strip "$kube_node_dir/pause"
		if [ ! -x "$kube_node_dir/coredns-$COREDNS_VERSION" ]; then
			say "building CoreDNS $COREDNS_VERSION (~2 min cold)"
			t0=$(date +%s)
			GOBIN=$kube_node_dir GOFLAGS= go install "github.com/coredns/coredns@v$COREDNS_VERSION" ||
				die "go install github.com/coredns/coredns@v$COREDNS_VERSION failed"
			mv "$kube_node_dir/coredns" "$kube_node_dir/coredns-$COREDNS_VERSION"
			say "CoreDNS built in $(($(date +%s) - t0)) s"
		fi
		ln -sf "coredns-$COREDNS_VERSION" "$kube_node_dir/coredns"
		stamp "$kube_node_dir" "$want"
		say "kubelet, kube-controller-manager, kube-scheduler, kube-proxy, kubectl, pause, coredns -> $kube_node_dir"
	}
}

# install_apt_packages LIST WHY: installs the Debian packages of LIST
# (name or name=version) that are not installed at that version; root only.
install_apt_packages() {
	local list=$1 why=$2 missing=() p name ver
	for p in $list; do
		name=${p%%=*}
		ver=
		[ "$name" != "$p" ] && ver=${p#*=}
		if [ -n "$ver" ]; then
			[ "$(dpkg-query -W -f='${Status} ${Version}' "$name" 2>/dev/null)" = "install ok installed $ver" ] || missing+=("$p")
		else
			dpkg-query -W -f='${Status}' "$name" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
		fi
	done
	[ ${#missing[@]} -eq 0 ] && return
	if [ "$(id -u)" != 0 ]; then
		say "not root: skipping Debian packages ${missing[*]} ($why: sudo apt-get install ${missing[*]})"
		return
	fi
	need apt-get "a Debian-based system (apt-get) or the packages ${missing[*]} by hand"
	say "installing Debian packages: ${missing[*]}"
	apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null && return
	# Debian's mirror keeps only the newest version of a package in each
	# suite: a security update removes the pinned one. The tests need the
	# package, not that build of it; say so loudly and take the newest.
	local names=()
	for p in "${missing[@]}"; do names+=("${p%%=*}"); done
	say "WARNING: apt-get install ${missing[*]} failed; installing the mirror's newest ${names[*]} instead: bump the pins in deps/versions.env (apt-cache policy NAME)"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${names[@]}" >/dev/null ||
		die "apt-get install ${names[*]} failed (apt-cache policy NAME shows what the mirror offers; the pins are in deps/versions.env)"
}

# The Debian containerd package ships a systemd unit; tests/cluster runs its own
# containerd (own config, root, state and socket) and never the system one.
install_node_debian() {
	install_apt_packages "$NODE_BUILD_PACKAGES $NODE_DEBIAN_PACKAGES" "tests/cluster needs them"
}

# kube-network-policies: the NetworkPolicy engine tests/cluster runs on its
# node when asked (Options.NetworkPolicy). Built from the module's source with
# deps/kube-network-policies-xt-nfqueue.patch: its rules hand packets to the
# nfqueue by the xtables NFQUEUE target instead of nftables' own "queue"
# expression, which a kernel without CONFIG_NFT_QUEUE (this project's build
# machine) refuses; the queue, the verdicts and the policy logic are upstream's.
# Static (CGO_ENABLED=0): tests/cluster runs it in a one-file image.
install_kube_network_policies() {
	local want="kube-network-policies $KUBE_NETWORK_POLICIES_VERSION static, patch $(sha256sum "$root/deps/kube-network-policies-xt-nfqueue.patch" | cut -c1-12)"
	stamped "$knp_dir" "$want" && return
	need go "Go 1.24+ (https://go.dev/dl)"
	need patch "patch (Debian: apt-get install patch)"
	say "building kube-network-policies $KUBE_NETWORK_POLICIES_VERSION (~1 min cold)"
	local src m=$knp_dir/build
	src=$(GOFLAGS= go mod download -json "sigs.k8s.io/kube-network-policies@v$KUBE_NETWORK_POLICIES_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
	[ -d "$src" ] || die "go mod download sigs.k8s.io/kube-network-policies@v$KUBE_NETWORK_POLICIES_VERSION failed"
	rm -rf "$m"
	mkdir -p "$knp_dir"
	cp -r "$src" "$m"
	chmod -R u+w "$m"
	(
		cd "$m"
		patch -p1 <"$root/deps/kube-network-policies-xt-nfqueue.patch" >build.log 2>&1 || { tail -n 5 build.log >&2; exit 1; }
		CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -o "$knp_dir/kube-network-policies" ./cmd >>build.log 2>&1 || { tail -n 20 build.log >&2; exit 1; }
	) || die "building kube-network-policies failed (log: $m/build.log)"
	stamp "$knp_dir" "$want"
	say "kube-network-policies -> $knp_dir"
}

install_helm() {
	local want="helm $HELM_VERSION"
	stamped "$helm_dir" "$want" && return
	need go "Go 1.24+ (https://go.dev/dl)"
	say "building helm $HELM_VERSION"
	mkdir -p "$helm_dir"
	GOBIN=$helm_dir GOFLAGS= go install "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION" ||
		die "go install helm.sh/helm/v3/cmd/helm@v$HELM_VERSION failed"
	stamp "$helm_dir" "$want"
	say "helm -> $helm_dir"
}

install_controller_gen() {
	local want="controller-gen $CONTROLLER_TOOLS_VERSION"
	stamped "$controller_gen_dir" "$want" && return
	need go "Go 1.26+ (https://go.dev/dl)"
	say "building controller-gen $CONTROLLER_TOOLS_VERSION (~30 s cold)"
	mkdir -p "$controller_gen_dir"
	GOBIN=$controller_gen_dir GOFLAGS= go install "sigs.k8s.io/controller-tools/cmd/controller-gen@v$CONTROLLER_TOOLS_VERSION" ||
		die "go install sigs.k8s.io/controller-tools/cmd/controller-gen@v$CONTROLLER_TOOLS_VERSION failed"
	stamp "$controller_gen_dir" "$want"
	say "controller-gen -> $controller_gen_dir"
}

install_otelcol() {
	local manifest=$otelcol_manifest
	local want
	want="builder $OTELCOL_VERSION manifest $(sha256sum "$manifest" | cut -d' ' -f1)"
	stamped "$otelcol_dir" "$want" && return
	need go "Go 1.24+ (https://go.dev/dl)"
	mkdir -p "$otelcol_dir/build" "$otelcol_builder"
	if [ ! -x "$otelcol_builder/builder" ]; then
		say "installing the Collector builder $OTELCOL_VERSION"
		GOBIN=$otelcol_builder GOFLAGS= go install "go.opentelemetry.io/collector/cmd/builder@v$OTELCOL_VERSION" ||
			die "go install go.opentelemetry.io/collector/cmd/builder@v$OTELCOL_VERSION failed"
	fi
	say "building the gateway Collector from $manifest (~3 min cold)"
	sed "s#^\([[:space:]]*output_path:\).*#\1 $otelcol_dir/build#" "$manifest" >"$otelcol_dir/manifest.yaml"
	(cd "$otelcol_dir" && GOFLAGS= "$otelcol_builder/builder" --config manifest.yaml >build.log 2>&1) ||
		die "the Collector build failed (log: $otelcol_dir/build.log): $(tail -n 3 "$otelcol_dir/build.log" | tr '\n' ' ')"
	mv "$otelcol_dir/build/spikehunt-otelcol" "$otelcol_dir/spikehunt-otelcol"
	stamp "$otelcol_dir" "$want"
	say "spikehunt-otelcol -> $otelcol_dir"
}

# The peers' Collector: only `make bench-peers` needs it, so `all` leaves it out.
# The builder only writes the sources: its `go mod tidy` would fetch the
# components' test-only modules too, and the module proxy here refuses some
# of those (scraper/scrapertest past v0.160.0). `go get` of the pinned
# modules and `go build -mod=mod` fetch only what the binary links.
install_otelcol_peers() {
	local manifest=$peers_otelcol_manifest
	local want
	want="builder $PEERS_OTELCOL_VERSION confmap $PEERS_OTELCOL_CONFMAP_VERSION manifest $(sha256sum "$manifest" | cut -d' ' -f1)"
	stamped "$peers_otelcol_dir" "$want" && return
	need go "Go 1.24+ (https://go.dev/dl)"
	rm -rf "$peers_otelcol_dir/build"
	mkdir -p "$peers_otelcol_dir/build" "$peers_otelcol_builder"
	if [ ! -x "$peers_otelcol_builder/builder" ]; then
		say "installing the Collector builder $PEERS_OTELCOL_VERSION"
		GOBIN=$peers_otelcol_builder GOFLAGS= go install "go.opentelemetry.io/collector/cmd/builder@v$PEERS_OTELCOL_VERSION" ||
			die "go install go.opentelemetry.io/collector/cmd/builder@v$PEERS_OTELCOL_VERSION failed"
	fi
	say "building the peers' Collector from $manifest (~3 min cold)"
	sed "s#^\([[:space:]]*output_path:\).*#\1 $peers_otelcol_dir/build#" "$manifest" >"$peers_otelcol_dir/manifest.yaml"
	local mods
	mods=$(awk '/gomod:/ {print $3 "@" $4}' "$manifest")
	(
		cd "$peers_otelcol_dir" &&
			GOFLAGS= "$peers_otelcol_builder/builder" --config manifest.yaml --skip-get-modules --skip-compilation &&
			cd build && GOFLAGS= go mod init peers-otelcol &&
			# shellcheck disable=SC2086 # one argument per module
			GOFLAGS= go get $mods \
				"go.opentelemetry.io/collector/otelcol@v$PEERS_OTELCOL_VERSION" \
				"go.opentelemetry.io/collector/confmap/provider/envprovider@v$PEERS_OTELCOL_CONFMAP_VERSION" \
				"go.opentelemetry.io/collector/confmap/provider/fileprovider@v$PEERS_OTELCOL_CONFMAP_VERSION" \
				"go.opentelemetry.io/collector/confmap/provider/httpprovider@v$PEERS_OTELCOL_CONFMAP_VERSION" \
				"go.opentelemetry.io/collector/confmap/provider/httpsprovider@v$PEERS_OTELCOL_CONFMAP_VERSION" \
				"go.opentelemetry.io/collector/confmap/provider/yamlprovider@v$PEERS_OTELCOL_CONFMAP_VERSION" &&
			GOFLAGS=-mod=mod go build -trimpath -o peers-otelcol .
	) >"$peers_otelcol_dir/build.log" 2>&1 ||
		die "the peers' Collector build failed (log: $peers_otelcol_dir/build.log): $(tail -n 3 "$peers_otelcol_dir/build.log" | tr '\n' ' ')"
	mv "$peers_otelcol_dir/build/peers-otelcol" "$peers_otelcol_dir/peers-otelcol"
	stamp "$peers_otelcol_dir" "$want"
	say "peers-otelcol -> $peers_otelcol_dir"
}

# node_exporter, the scrape `make bench-peers` compares one spikehunt
# sampling pass with (tests/peers). Benchmarks only: `all` leaves it out.
install_node_exporter() {
	local want="node_exporter $NODE_EXPORTER_VERSION"
	stamped "$node_exporter_dir" "$want" && return
	need go "Go 1.24+ (https://go.dev/dl)"
	say "building node_exporter $NODE_EXPORTER_VERSION (~1 min cold)"
	mkdir -p "$node_exporter_dir"
	GOBIN=$node_exporter_dir GOFLAGS= go install "github.com/prometheus/node_exporter@v$NODE_EXPORTER_VERSION" ||
		die "go install github.com/prometheus/node_exporter@v$NODE_EXPORTER_VERSION failed"
	stamp "$node_exporter_dir" "$want"
	say "node_exporter -> $node_exporter_dir"
}

install_debian() {
	install_apt_packages "$DEBIAN_PACKAGES" "privileged tests need them"
}

# tracefs at /sys/kernel/tracing: the ftrace recorder writes there, and
# bpftrace and perf find tracepoints there. systemd mounts it on most
# hosts; this machine's kernel boots without it (DEPS.md). Not a package:
# nothing to stamp, the mount table is checked each time.
mount_tracefs() {
	local dir=/sys/kernel/tracing
	[ -d "$dir/instances" ] && return
	if [ "$(id -u)" != 0 ]; then
		say "not root: tracefs is not mounted at $dir (privileged tests need it: sudo mount -t tracefs nodev $dir)"
		return
	fi
	if mount -t tracefs nodev "$dir" 2>/dev/null; then
		say "mounted tracefs at $dir"
	else
		say "could not mount tracefs at $dir (the ftrace and bpftrace tests will say so)"
	fi
}

# Grafana's dashboard types (@grafana/schema) and the TypeScript compiler:
# the dashboards' test type-checks every dashboard, panel options and field
# config against them (Grafana's own schema; no Grafana server is needed).
install_grafana_schema() {
	local want="@grafana/schema@$GRAFANA_SCHEMA_VERSION typescript@$TYPESCRIPT_VERSION"
	stamped "$grafana_schema_dir" "$want" && return
	need npm "Node.js with npm (Debian: apt-get install npm)"
	say "fetching @grafana/schema $GRAFANA_SCHEMA_VERSION and typescript $TYPESCRIPT_VERSION from npm (~25 MB)"
	local tmp
	tmp=$(mktemp -d "$cache/grafana-schema.XXXXXX")
	scratch+=("$tmp")
	printf '{"name":"spikehunt-dashboard-check","private":true,"dependencies":{"@grafana/schema":"%s","typescript":"%s"}}\n' \
		"$GRAFANA_SCHEMA_VERSION" "$TYPESCRIPT_VERSION" >"$tmp/package.json"
	(cd "$tmp" && npm install --silent --no-audit --no-fund --ignore-scripts >"$tmp/npm.log" 2>&1) ||
		die "npm install @grafana/schema typescript failed: $(tail -n 3 "$tmp/npm.log" | tr '\n' ' ')"
	rm -rf "$grafana_schema_dir"
	mkdir -p "$(dirname "$grafana_schema_dir")"
	mv "$tmp" "$grafana_schema_dir"
	stamp "$grafana_schema_dir" "$want"
	say "@grafana/schema, tsc -> $grafana_schema_dir"
}

# The official ClickHouse clients that pipelines/services/chhttp's conformance test
# runs against serve-clickhouse: clickhouse-connect in a virtualenv (py/),
# @clickhouse/client in node_modules (js/), client-v2 and its dependencies as
# jars (java/libs). The test's client scripts live in
# pipelines/services/chhttp/testdata/clients.
install_chclients() {
	local want="clickhouse-connect==$CLICKHOUSE_CONNECT_VERSION $CLICKHOUSE_CONNECT_DEPS @clickhouse/client@$CLICKHOUSE_JS_VERSION com.clickhouse:client-v2:$CLICKHOUSE_JAVA_VERSION"
	stamped "$chclients_dir" "$want" && return
	need python3 "Python 3.9+ with venv (Debian: apt-get install python3-venv)"
	need npm "Node.js 18+ with npm (Debian: apt-get install npm)"
	need java "a Java 17+ JDK (Debian: apt-get install openjdk-17-jdk-headless)"
	need mvn "Maven (Debian: apt-get install maven)"
	say "fetching clickhouse-connect $CLICKHOUSE_CONNECT_VERSION (PyPI), @clickhouse/client $CLICKHOUSE_JS_VERSION (npm), client-v2 $CLICKHOUSE_JAVA_VERSION (Maven Central)"
	# Built in place (a venv's scripts name their folder), under a name
	# that only the stamp makes valid.
	rm -rf "$chclients_dir"
	mkdir -p "$chclients_dir/js" "$chclients_dir/java"
	python3 -m venv "$chclients_dir/py" >"$chclients_dir/pip.log" 2>&1 ||
		die "python3 -m venv $chclients_dir/py failed: $(tail -n 2 "$chclients_dir/pip.log" | tr '\n' ' ')"
	# --no-deps with every dependency pinned: the venv holds exactly these.
	# shellcheck disable=SC2086
	"$chclients_dir/py/bin/pip" install -q --no-deps --only-binary=:all: "clickhouse-connect==$CLICKHOUSE_CONNECT_VERSION" $CLICKHOUSE_CONNECT_DEPS >>"$chclients_dir/pip.log" 2>&1 ||
		die "pip install clickhouse-connect==$CLICKHOUSE_CONNECT_VERSION failed: $(tail -n 3 "$chclients_dir/pip.log" | tr '\n' ' ')"
	printf '{"name":"spikehunt-chclients","private":true,"dependencies":{"@clickhouse/client":"%s"}}\n' "$CLICKHOUSE_JS_VERSION" >"$chclients_dir/js/package.json"
	(cd "$chclients_dir/js" && npm install --silent --no-audit --no-fund --ignore-scripts >"$chclients_dir/npm.log" 2>&1) ||
		die "npm install @clickhouse/client@$CLICKHOUSE_JS_VERSION failed: $(tail -n 3 "$chclients_dir/npm.log" | tr '\n' ' ')"
	cat >"$chclients_dir/java/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.spikehunt.deps</groupId>
  <artifactId>chclients</artifactId>
  <version>1</version>
  <dependencies>
    <dependency><groupId>com.clickhouse</groupId><artifactId>client-v2</artifactId><version>$CLICKHOUSE_JAVA_VERSION</version></dependency>
  </dependencies>
</project>
EOF
	(cd "$chclients_dir/java" && mvn -q -B -C dependency:copy-dependencies -DoutputDirectory="$chclients_dir/java/libs" >"$chclients_dir/mvn.log" 2>&1) ||
		die "mvn could not fetch com.clickhouse:client-v2:$CLICKHOUSE_JAVA_VERSION: $(grep -m1 ERROR "$chclients_dir/mvn.log" || tail -n 1 "$chclients_dir/mvn.log")"
	stamp "$chclients_dir" "$want"
	say "clickhouse-connect, @clickhouse/client, client-v2 -> $chclients_dir"
}

mkdir -p "$cache"
[ $# -eq 0 ] && set -- all
for what in "$@"; do
	case $what in
	all) install_chdb; install_kafka; install_s3proxy; install_envtest; install_kube_node; install_kube_network_policies; install_helm; install_controller_gen; install_otelcol; install_grafana_schema; install_chclients; install_debian; mount_tracefs ;;
	chdb) install_chdb ;;
	kafka) install_kafka ;;
	s3proxy) install_s3proxy ;;
	envtest) install_envtest ;;
	kube-node) install_kube_node ;;
	kube-network-policies) install_kube_network_policies ;;
	helm) install_helm ;;
	controller-gen) install_controller_gen ;;
	otelcol) install_otelcol ;;
	otelcol-peers) install_otelcol_peers ;;
	node-exporter) install_node_exporter ;;
	grafana-schema) install_grafana_schema ;;
	chclients) install_chclients ;;
	debian) install_debian ;;
	tracefs) mount_tracefs ;;
	env) print_env ;;
	*) die "unknown component '$what' (want: all chdb kafka s3proxy envtest kube-node kube-network-policies helm controller-gen otelcol otelcol-peers node-exporter grafana-schema chclients debian tracefs env)" ;;
	esac
done
