//go:build linux

package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// nodeConfig is what makes one node's kubelet, kube-proxy, CNI network and
// containerd its own: the first node's live under Dir, each node of
// Options.Nodes under Dir/nodes/<name>.
type nodeConfig struct {
	dir, name, ip, podCIDR string
	cgroup                 string // the kubelet's cgroupRoot
	kubeletPort            int
	kubeletHealthz         int
	proxyHealthz           string // host:port
	proxyMetrics           string // host:port
	caFile                 string
	kubeletServing         certPair
	kubeletKubeconfig      string
	proxyKubeconfig        string
	dnsServiceIP           string
	podLogsDir             string
	ctrdSock               string
}

// nodeConfigFiles are the command line and configuration files
// writeNodeConfigs wrote.
type nodeConfigFiles struct {
	kubeletArgs      []string
	proxyConfig      string
	containerdConfig string
}

// writeNodeConfigs writes the kubelet's and kube-proxy's configuration, the
// CNI bridge network and containerd's configuration of one node.
func writeNodeConfigs(n nodeConfig) (nodeConfigFiles, error) {
	d := func(parts ...string) string { return filepath.Join(append([]string{n.dir}, parts...)...) }
	for _, dir := range []string{d("cni", "net.d"), d("containerd")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nodeConfigFiles{}, err
		}
	}
	// The kubelet and kube-proxy protect themselves from the OOM killer with
	// -999 where the process may lower its score.
	canLowerOOMScore := hasCapability(capSysResource)
	oomScoreAdj := "-999"
	if !canLowerOOMScore {
		oomScoreAdj = "0"
	}
	var out nodeConfigFiles
	kubeletConfig := d("kubelet.yaml")
	if err := os.WriteFile(kubeletConfig, fmt.Appendf(nil, `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 0.0.0.0
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %s}
authorization: {mode: Webhook}
tlsCertFile: %s
tlsPrivateKeyFile: %s
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
cgroupRoot: %s
cgroupsPerQOS: true
oomScoreAdj: %s
clusterDNS: [%s]
clusterDomain: %s
# The machine mounts cgroup v1 hierarchies; kubelet 1.33 still runs on them
# when told to.
failCgroupV1: false
failSwapOn: false
podLogsDir: %s
volumePluginDir: %s
resolvConf: /etc/resolv.conf
serializeImagePulls: false
# The disk is shared with builds: evict only when it is really full, and
# never collect the imported images (nothing could pull them back).
evictionHard: {memory.available: 50Mi, nodefs.available: 1%%, imagefs.available: 1%%, nodefs.inodesFree: 1%%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`, n.kubeletPort, n.kubeletHealthz, n.caFile, n.kubeletServing.Cert, n.kubeletServing.Key, n.ctrdSock, n.cgroup, oomScoreAdj, n.dnsServiceIP, ClusterDomain,
		n.podLogsDir, d("kubelet", "volume-plugins")), 0o600); err != nil {
		return nodeConfigFiles{}, err
	}
	out.kubeletArgs = []string{
		"--config=" + kubeletConfig,
		"--kubeconfig=" + n.kubeletKubeconfig,
		"--root-dir=" + d("kubelet"),
		"--cert-dir=" + d("kubelet", "pki"),
		"--node-ip=" + n.ip,
		"--hostname-override=" + n.name,
		"--v=1",
	}

	out.proxyConfig = d("kube-proxy.yaml")
	if err := os.WriteFile(out.proxyConfig, fmt.Appendf(nil, `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %s}
hostnameOverride: %s
mode: iptables
clusterCIDR: %s
healthzBindAddress: %s
metricsBindAddress: %s
oomScoreAdj: %s
# Leave the host's conntrack table size and timeouts as they are.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
# localhostNodePorts would set net.ipv4.conf.all.route_localnet=1 on the host.
iptables: {localhostNodePorts: false, syncPeriod: 10s, minSyncPeriod: 0s}
`, n.proxyKubeconfig, n.name, n.podCIDR, n.proxyHealthz, n.proxyMetrics, oomScoreAdj), 0o600); err != nil {
		return nodeConfigFiles{}, err
	}

	// The bridge network, with portmap for hostPort; containerd adds the
	// loopback plugin itself.
	if err := os.WriteFile(d("cni", "net.d", "10-spikehunt.conflist"), fmt.Appendf(nil, `{
  "cniVersion": "1.0.0",
  "name": "spikehunt",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, bridgeName, n.podCIDR, d("cni", "ipam")), 0o644); err != nil {
		return nodeConfigFiles{}, err
	}

	out.containerdConfig = d("containerd", "config.toml")
	if err := os.WriteFile(out.containerdConfig, fmt.Appendf(nil, `version = 2
root = %q
state = %q
[grpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # Clamp the OOM score adjustments of pods (-998 for the sandbox) to
  # containerd's own: lowering one needs CAP_SYS_RESOURCE, which a
  # container or VM sandbox running the tests may lack (runc then fails
  # with "failed to update /proc/self/oom_score_adj: Permission denied").
  restrict_oom_score_adj = %t
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, d("containerd", "root"), d("containerd", "state"), n.ctrdSock, d("containerd", "opt"), PauseImage, !canLowerOOMScore,
		d("containerd", "runc"), cniBinDir, d("cni", "net.d")), 0o600); err != nil {
		return nodeConfigFiles{}, err
	}
	return out, nil
}

// hostPortOf joins an address and a port, for the configuration files.
func hostPortOf(host string, port int) string { return host + ":" + strconv.Itoa(port) }
