//go:build linux

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// extraNode is a node of Options.Nodes: containerd, a kubelet and
// kube-proxy in a network namespace of their own, joined to the host by a
// veth pair, and in a mount namespace of their own so that the node's
// Private folders, its pods' mounts and its containers' root filesystems
// are the node's alone.
type extraNode struct {
	opts     NodeOptions
	ip       string // the node's end of its link: its InternalIP
	hostIP   string // the host's end
	netns    string // the network namespace's path, /run/netns/<name>
	mntns    string // the file the mount namespace is bound to
	ctrdSock string
	cgroup   string
}

// NodeInfo is one node of the cluster.
type NodeInfo struct {
	Name, IP, PodCIDR string
}

// Nodes lists the cluster's nodes, the control plane's first.
func (c *Cluster) Nodes() []NodeInfo {
	ns := []NodeInfo{{Name: c.opts.NodeName, IP: c.nodeIP, PodCIDR: c.opts.PodCIDR}}
	for _, n := range c.nodes {
		ns = append(ns, NodeInfo{Name: n.opts.Name, IP: n.ip, PodCIDR: n.opts.PodCIDR})
	}
	return ns
}

// Fixed ports of a node of Options.Nodes: its network namespace is its
// own, so nothing else binds them.
const (
	extraKubeletPort    = 10250
	extraKubeletHealthz = 10248
	extraProxyHealthz   = 10256
	extraProxyMetrics   = 10249
)

// linkAddrs are the host's and the node's addresses of a /30.
func linkAddrs(cidr string) (host, node string, err error) {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		return "", "", err
	}
	ip := n.IP.To4()
	h, nd := make(net.IP, 4), make(net.IP, 4)
	copy(h, ip)
	copy(nd, ip)
	h[3]++
	nd[3] += 2
	return h.String(), nd.String(), nil
}

// run runs a host command for the node's plumbing, its output in the error.
func run(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// saveHostState rewrites Dir/host-state.json after Start adds to what it
// changes on the host, so that a later Start cleans up after it too.
func saveHostState(h *hostState) error {
	b, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(h.Dir, "host-state.json"), b, 0o600)
}

// addNode builds node i of Options.Nodes and returns once it is Ready and
// its kube-proxy has synced. Everything it changes on the host is in
// c.host before it is made, for teardown.
func (c *Cluster) addNode(ctx context.Context, i int, o NodeOptions, bins binaries, images []string, cs kubernetes.Interface, ready func(*component, time.Time)) error {
	hostIP, nodeIP, err := linkAddrs(o.Link)
	if err != nil {
		return fmt.Errorf("node %s: link %s: %w", o.Name, o.Link, err)
	}
	n := &extraNode{opts: o, ip: nodeIP, hostIP: hostIP, netns: "/run/netns/spikehunt-" + o.Name, cgroup: c.host.Cgroup + "/" + o.Name}
	dir := filepath.Join(c.dir, "nodes", o.Name)
	n.ctrdSock = filepath.Join(dir, "containerd", "containerd.sock")
	link := "spikehunt-v" + strconv.Itoa(i+1) // at most 15 bytes, as a link name must be
	c.host.Links = append(c.host.Links, link)
	for _, p := range o.Private {
		if _, err := os.Stat(p); os.IsNotExist(err) {
			c.host.Absent = append(c.host.Absent, p)
		}
	}
	if err := saveHostState(c.host); err != nil {
		return fmt.Errorf("node %s: record the host's state: %w", o.Name, err)
	}
	c.nodes = append(c.nodes, n)

	// The network: a namespace, a veth pair to the host, routes both ways.
	// The node's pods reach the first node's pods, its address and the
	// Services through the host; the host routes the node's pod range to it.
	if err := run("ip", "netns", "add", filepath.Base(n.netns)); err != nil {
		return fmt.Errorf("node %s: %w", o.Name, err)
	}
	in := func(args ...string) error {
		return run("ip", append([]string{"-n", filepath.Base(n.netns)}, args...)...)
	}
	for _, step := range []func() error{
		func() error {
			return run("ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", filepath.Base(n.netns))
		},
		func() error { return run("ip", "addr", "add", hostIP+"/30", "dev", link) },
		func() error { return run("ip", "link", "set", link, "up") },
		func() error { return in("link", "set", "lo", "up") },
		func() error { return in("addr", "add", nodeIP+"/30", "dev", "eth0") },
		func() error { return in("link", "set", "eth0", "up") },
		func() error { return in("route", "add", "default", "via", hostIP) },
		func() error { return run("ip", "route", "add", o.PodCIDR, "via", nodeIP, "dev", link) },
		// Forwarding is per network namespace, and off in a new one; so is
		// bridge netfilter, which kube-proxy needs for a pod that reaches a
		// Service whose endpoint is on its own bridge.
		func() error {
			return run("nsenter", "--net="+n.netns, "sh", "-c",
				"echo 1 > /proc/sys/net/ipv4/ip_forward && if [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]; then echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables; fi")
		},
	} {
		if err := step(); err != nil {
			return fmt.Errorf("node %s: network: %w", o.Name, err)
		}
	}

	// The mount namespace, bound to a file under Dir (on a private mount, as
	// a namespace file must be), a slave of the host's: it sees the host's
	// mounts, and the host does not see its own (pods' volumes, overlays,
	// the Private folders).
	nsDir := filepath.Join(c.dir, "ns")
	n.mntns = filepath.Join(nsDir, o.Name+".mnt")
	for _, p := range o.Private {
		if err := os.MkdirAll(filepath.Join(dir, "private", p), 0o755); err != nil {
			return fmt.Errorf("node %s: %w", o.Name, err)
		}
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("node %s: private folder: %w", o.Name, err)
		}
	}
	if err := os.MkdirAll(nsDir, 0o755); err != nil {
		return fmt.Errorf("node %s: %w", o.Name, err)
	}
	if ms, _ := mountsUnder(nsDir); len(ms) == 0 {
		if err := run("mount", "--bind", nsDir, nsDir); err != nil {
			return fmt.Errorf("node %s: %w", o.Name, err)
		}
	}
	if err := run("mount", "--make-private", nsDir); err != nil {
		return fmt.Errorf("node %s: %w", o.Name, err)
	}
	if err := os.WriteFile(n.mntns, nil, 0o600); err != nil {
		return fmt.Errorf("node %s: %w", o.Name, err)
	}
	if err := run("unshare", "--mount="+n.mntns, "--propagation", "slave", "true"); err != nil {
		return fmt.Errorf("node %s: mount namespace: %w", o.Name, err)
	}
	for _, p := range o.Private {
		if err := run("nsenter", "--mount="+n.mntns, "mount", "--bind", filepath.Join(dir, "private", p), p); err != nil {
			return fmt.Errorf("node %s: private folder: %w", o.Name, err)
		}
	}
	if err := makeCgroupRoot(n.cgroup); err != nil {
		return fmt.Errorf("node %s: %w", o.Name, err)
	}

	// Certificates of the node's own, from the cluster's CA; the API server
	// on the first node's address (the node's loopback is its own).
	apiURL := "https://" + net.JoinHostPort(c.nodeIP, strconv.Itoa(c.apiPort))
	hostname, _ := os.Hostname()
	serving, err := c.pki.issue("kubelet-serving-"+o.Name, o.Name, nil, []string{o.Name, hostname, "localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.ParseIP(nodeIP)})
	if err != nil {
		return fmt.Errorf("node %s: %w", o.Name, err)
	}
	kubeconfigs := map[string]string{}
	for name, cn := range map[string][]string{"kubelet": {"system:node:" + o.Name, "system:nodes"}, "kube-proxy": {"system:kube-proxy"}} {
		cp, err := c.pki.issue("client-"+name+"-"+o.Name, cn[0], cn[1:], nil, nil)
		if err != nil {
			return fmt.Errorf("node %s: %w", o.Name, err)
		}
		kubeconfigs[name] = filepath.Join(dir, "kubeconfig", name+".kubeconfig")
		if err := os.MkdirAll(filepath.Dir(kubeconfigs[name]), 0o700); err != nil {
			return fmt.Errorf("node %s: %w", o.Name, err)
		}
		if err := writeKubeconfig(kubeconfigs[name], apiURL, c.pki.CAFile, cp); err != nil {
			return fmt.Errorf("node %s: %w", o.Name, err)
		}
	}
	files, err := writeNodeConfigs(nodeConfig{
		dir: dir, name: o.Name, ip: nodeIP, podCIDR: o.PodCIDR, cgroup: n.cgroup,
		kubeletPort: extraKubeletPort, kubeletHealthz: extraKubeletHealthz,
		proxyHealthz: hostPortOf(nodeIP, extraProxyHealthz), proxyMetrics: hostPortOf("127.0.0.1", extraProxyMetrics),
		caFile: c.pki.CAFile, kubeletServing: serving, kubeletKubeconfig: kubeconfigs["kubelet"], proxyKubeconfig: kubeconfigs["kube-proxy"],
		dnsServiceIP: c.dnsServiceIP, podLogsDir: filepath.Join(c.logDir, o.Name, "pods"), ctrdSock: n.ctrdSock,
	})
	if err != nil {
		return fmt.Errorf("node %s: %w", o.Name, err)
	}

	// Each process enters both namespaces (nsenter execs it: the pid, and
	// so Pdeathsig and the cgroup, are the component's own).
	start := func(comp, bin string, args ...string) (*component, time.Time, error) {
		p, err := startComponent(c.logDir, o.Name+"-"+comp, "nsenter", append([]string{"--mount=" + n.mntns, "--net=" + n.netns, "--", bin}, args...)...)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("node %s: %w", o.Name, err)
		}
		c.comps = append(c.comps, p)
		if err := joinRuntimeCgroup(n.cgroup, p.cmd.Process.Pid); err != nil {
			return nil, time.Time{}, fmt.Errorf("node %s: %w", o.Name, err)
		}
		return p, time.Now(), nil
	}
	ctrd, ctrdT, err := start("containerd", bins.containerd, "--config", files.containerdConfig)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, ctrd, o.Name+"'s containerd", func() error { _, err := c.ctrAt(ctx, n.ctrdSock, "version"); return err }); err != nil {
		return err
	}
	for _, img := range images {
		if err := c.importInto(ctx, n.ctrdSock, img); err != nil {
			return fmt.Errorf("node %s: %w", o.Name, err)
		}
	}
	ready(ctrd, ctrdT)
	kubelet, kubeletT, err := start("kubelet", bins.kubelet, files.kubeletArgs...)
	if err != nil {
		return err
	}
	proxy, proxyT, err := start("kube-proxy", bins.proxy, "--config", files.proxyConfig)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, kubelet, "node "+o.Name+" Ready", func() error { return nodeReady(ctx, cs, o.Name) }); err != nil {
		return err
	}
	ready(kubelet, kubeletT)
	if err := waitFor(ctx, proxy, o.Name+"'s kube-proxy /healthz", func() error {
		return httpOK(http.DefaultClient, "http://"+hostPortOf(nodeIP, extraProxyHealthz)+"/healthz")
	}); err != nil {
		return err
	}
	ready(proxy, proxyT)
	return nil
}
