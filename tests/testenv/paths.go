package testenv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DepPaths are the install locations of the real components, as printed by
// `deps/install.sh env`. A value names where a component should be; it may
// not exist yet. The accessor methods check that it does.
type DepPaths struct {
	LibCHDB           string // SPIKEHUNT_LIBCHDB: libchdb.so, the embedded ClickHouse engine.
	KafkaLibs         string // SPIKEHUNT_KAFKA_LIBS: folder of the Kafka broker's jars.
	S3ProxyLibs       string // SPIKEHUNT_S3PROXY_LIBS: folder of s3proxy's jars (an S3 API server).
	KubebuilderAssets string // KUBEBUILDER_ASSETS: folder with kube-apiserver and etcd.
	KubeNode          string // SPIKEHUNT_KUBE_NODE: folder with kubelet, kube-controller-manager, kube-scheduler, kube-proxy, pause and coredns (tests/cluster).
	KubeNetPolicies   string // SPIKEHUNT_KUBE_NETWORK_POLICIES: the NetworkPolicy engine tests/cluster runs with Options.NetworkPolicy.
	Helm              string // SPIKEHUNT_HELM: the helm binary.
	Otelcol           string // SPIKEHUNT_OTELCOL: the gateway Collector built from pipelines/services/otel.
	ControllerGen     string // SPIKEHUNT_CONTROLLER_GEN: controller-gen, for operator/api's generated files.
	ChClients         string // SPIKEHUNT_CHCLIENTS: the official ClickHouse clients (py/, js/, java/libs) serve-clickhouse is tested with.
}

// depVars lists the variables of DepPaths in the order install.sh prints them.
var depVars = []string{"SPIKEHUNT_LIBCHDB", "SPIKEHUNT_KAFKA_LIBS", "SPIKEHUNT_S3PROXY_LIBS", "KUBEBUILDER_ASSETS", "SPIKEHUNT_KUBE_NODE", "SPIKEHUNT_KUBE_NETWORK_POLICIES", "SPIKEHUNT_HELM", "SPIKEHUNT_CONTROLLER_GEN", "SPIKEHUNT_OTELCOL", "SPIKEHUNT_CHCLIENTS"}

// Paths returns each install location from the environment variable of the
// same name when it is set, else from `<repo root>/deps/install.sh env`. The
// repo root is the nearest folder above the working directory holding go.mod.
// The script is run only when a variable is unset.
func Paths() (DepPaths, error) {
	return resolvePaths(os.Getenv, installScriptEnv)
}

// resolvePaths does the work of Paths; scriptEnv is called at most once, and
// only when getenv leaves a variable empty.
func resolvePaths(getenv func(string) string, scriptEnv func() ([]byte, error)) (DepPaths, error) {
	values := make(map[string]string, len(depVars))
	var missing []string
	for _, name := range depVars {
		if v := getenv(name); v != "" {
			values[name] = v
		} else {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		out, err := scriptEnv()
		if err != nil {
			return DepPaths{}, fmt.Errorf("testenv: %s unset and %w", strings.Join(missing, ", "), err)
		}
		printed := parseDepEnv(out)
		for _, name := range missing {
			values[name] = printed[name]
		}
	}
	return DepPaths{
		LibCHDB:           values["SPIKEHUNT_LIBCHDB"],
		KafkaLibs:         values["SPIKEHUNT_KAFKA_LIBS"],
		S3ProxyLibs:       values["SPIKEHUNT_S3PROXY_LIBS"],
		KubebuilderAssets: values["KUBEBUILDER_ASSETS"],
		KubeNode:          values["SPIKEHUNT_KUBE_NODE"],
		KubeNetPolicies:   values["SPIKEHUNT_KUBE_NETWORK_POLICIES"],
		Helm:              values["SPIKEHUNT_HELM"],
		Otelcol:           values["SPIKEHUNT_OTELCOL"],
		ControllerGen:     values["SPIKEHUNT_CONTROLLER_GEN"],
		ChClients:         values["SPIKEHUNT_CHCLIENTS"],
	}, nil
}

// parseDepEnv reads NAME=VALUE lines; other lines are ignored.
func parseDepEnv(out []byte) map[string]string {
	vars := make(map[string]string)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		name, value, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok || name == "" || strings.HasPrefix(name, "#") {
			continue
		}
		vars[name] = value
	}
	return vars
}

// installScriptEnv runs `deps/install.sh env` of the repo around the working
// directory. Its errors read as the end of a sentence started by the caller.
func installScriptEnv() ([]byte, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	script := filepath.Join(root, "deps", "install.sh")
	cmd := exec.Command(script, "env")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s env failed: %w: %s", script, err, oneLine(stderr.String()))
	}
	return out, nil
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("cannot find the repo root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory: run the tests inside the repo or set the variables `deps/install.sh env` prints")
		}
		dir = parent
	}
}

// KafkaLibsDir returns the folder of Kafka jars, or an error saying how to install it.
func (p DepPaths) KafkaLibsDir() (string, error) {
	return requirePath("Kafka jars", "SPIKEHUNT_KAFKA_LIBS", p.KafkaLibs, "kafka-server-*.jar")
}

// S3ProxyLibsDir returns the folder of s3proxy's jars, or an error saying
// how to install them.
func (p DepPaths) S3ProxyLibsDir() (string, error) {
	return requirePath("s3proxy jars", "SPIKEHUNT_S3PROXY_LIBS", p.S3ProxyLibs, "s3proxy-*.jar")
}

// EnvtestAssetsDir returns the folder holding kube-apiserver and etcd, or an
// error saying how to build them.
func (p DepPaths) EnvtestAssetsDir() (string, error) {
	dir, err := requirePath("envtest binaries", "KUBEBUILDER_ASSETS", p.KubebuilderAssets, "kube-apiserver")
	if err != nil {
		return "", err
	}
	return requirePath("envtest binaries", "KUBEBUILDER_ASSETS", dir, "etcd")
}

// KubeNodeDir returns the folder of the node binaries tests/cluster runs
// (kubelet, kube-controller-manager, kube-scheduler, kube-proxy, pause,
// coredns), or
// an error saying how to build them.
func (p DepPaths) KubeNodeDir() (string, error) {
	for _, bin := range []string{"kubelet", "kube-controller-manager", "kube-scheduler", "kube-proxy", "pause", "coredns"} {
		if _, err := requirePath("the Kubernetes node binaries", "SPIKEHUNT_KUBE_NODE", p.KubeNode, bin); err != nil {
			return "", fmt.Errorf("%w (deps/install.sh kube-node)", err)
		}
	}
	return p.KubeNode, nil
}

// KubeNetworkPoliciesBinary returns the path of kube-network-policies, or
// an error saying how to build it.
func (p DepPaths) KubeNetworkPoliciesBinary() (string, error) {
	path, err := requirePath("the NetworkPolicy engine", "SPIKEHUNT_KUBE_NETWORK_POLICIES", p.KubeNetPolicies, "")
	if err != nil {
		return "", fmt.Errorf("%w (deps/install.sh kube-network-policies)", err)
	}
	return path, nil
}

// LibCHDBFile returns the path of libchdb.so, or an error saying how to install it.
func (p DepPaths) LibCHDBFile() (string, error) {
	return requirePath("libchdb.so", "SPIKEHUNT_LIBCHDB", p.LibCHDB, "")
}

// HelmBinary returns the path of the helm binary, or an error saying how to install it.
func (p DepPaths) HelmBinary() (string, error) {
	return requirePath("helm", "SPIKEHUNT_HELM", p.Helm, "")
}

// OtelcolBinary returns the path of the gateway Collector, or an error
// saying how to build it.
func (p DepPaths) OtelcolBinary() (string, error) {
	return requirePath("the gateway Collector", "SPIKEHUNT_OTELCOL", p.Otelcol, "")
}

// ControllerGenBinary returns the path of controller-gen, or an error saying
// how to install it.
func (p DepPaths) ControllerGenBinary() (string, error) {
	return requirePath("controller-gen", "SPIKEHUNT_CONTROLLER_GEN", p.ControllerGen, "")
}

// ChClientsDir returns the folder of the official ClickHouse clients
// (clickhouse-connect in py/, @clickhouse/client in js/node_modules,
// client-v2's jars in java/libs), or an error saying how to install them.
func (p DepPaths) ChClientsDir() (string, error) {
	for _, inside := range []string{"py/bin/python", "js/node_modules/@clickhouse/client/package.json", "java/libs/client-v2-*.jar", ".installed"} {
		if _, err := requirePath("the ClickHouse clients", "SPIKEHUNT_CHCLIENTS", p.ChClients, inside); err != nil {
			return "", fmt.Errorf("%w (deps/install.sh chclients)", err)
		}
	}
	return p.ChClients, nil
}

// requirePath checks that path exists and, when inside is not empty, that
// the glob inside matches something in it. The error is one line that says
// what to run, because it ends up as the only output of a failed test.
func requirePath(what, envVar, path, inside string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("testenv: %s: %s is not set and deps/install.sh env does not print it: run `make deps`", what, envVar)
	}
	check := path
	if inside != "" {
		check = filepath.Join(path, inside)
	}
	matches, err := filepath.Glob(check)
	if err != nil || len(matches) == 0 {
		return "", fmt.Errorf("testenv: %s: %s not found (%s=%s): run `make deps`", what, check, envVar, path)
	}
	return path, nil
}

// oneLine squeezes a tool's output into one line for an error message.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
