//go:build linux

package cluster

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// nodeFiles are the node's certificates, kubeconfigs, configuration files
// and command lines, written under Dir by writeFiles.
type nodeFiles struct {
	caFile                string
	admin                 certPair
	etcdURL, apiURL       string
	schedulerHealthz      string
	dnsReady              string
	dnsPort               int
	dnsServiceIP          string
	corefile              string
	proxyHealthz          string
	containerdConfig      string
	proxyConfig           string
	etcdArgs              []string
	apiserverArgs         []string
	controllerManagerArgs []string
	schedulerArgs         []string
	kubeletArgs           []string
}

// freePorts binds n ports of 0.0.0.0 at once, so that they differ, and
// releases them; another process can take one before its component binds
// it, and the component then fails to start with its log in the error.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp4", "0.0.0.0:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (c *Cluster) writeFiles() (nodeFiles, error) {
	o := c.opts
	d := func(parts ...string) string { return filepath.Join(append([]string{c.dir}, parts...)...) }
	ports, err := freePorts(11)
	if err != nil {
		return nodeFiles{}, err
	}
	etcdClient, etcdPeer, apiPort, kubeletPort, kubeletHealthz, schedPort, proxyHealthz, proxyMetrics := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5], ports[6], ports[7]
	dnsPort, dnsHealth, dnsReady := ports[8], ports[9], ports[10]

	_, svcNet, _ := net.ParseCIDR(o.ServiceCIDR)
	kubernetesSvcIP := make(net.IP, 4)
	copy(kubernetesSvcIP, svcNet.IP.To4())
	kubernetesSvcIP[3]++
	// The tenth address, as kubeadm and local-up-cluster.sh give kube-dns.
	dnsSvcIP := make(net.IP, 4)
	copy(dnsSvcIP, svcNet.IP.To4())
	dnsSvcIP[3] += 10
	nodeIP := net.ParseIP(c.nodeIP)

	p, err := newPKI(d("pki"))
	if err != nil {
		return nodeFiles{}, fmt.Errorf("certificates: %w", err)
	}
	// More nodes (Options.Nodes) get their certificates from the same CA,
	// and reach the API server on the node's address, not its loopback.
	c.pki, c.apiPort, c.dnsServiceIP = p, apiPort, dnsSvcIP.String()
	hostname, _ := os.Hostname()
	apiServing, err := p.issue("kube-apiserver", "kube-apiserver", nil,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.IPv4(127, 0, 0, 1), nodeIP, kubernetesSvcIP})
	if err != nil {
		return nodeFiles{}, err
	}
	kubeletServing, err := p.issue("kubelet-serving", o.NodeName, nil, []string{o.NodeName, hostname, "localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), nodeIP})
	if err != nil {
		return nodeFiles{}, err
	}
	// The users the bootstrap RBAC policy binds: system:kube-controller-manager,
	// system:kube-scheduler, system:kube-proxy, and a node in system:nodes
	// for the Node authorizer and NodeRestriction.
	clients := map[string]struct {
		cn   string
		orgs []string
	}{
		"admin":                   {"spikehunt-admin", []string{"system:masters"}},
		"apiserver-kubelet":       {"kube-apiserver", []string{"system:masters"}},
		"kube-controller-manager": {"system:kube-controller-manager", nil},
		"kube-scheduler":          {"system:kube-scheduler", nil},
		"kube-proxy":              {"system:kube-proxy", nil},
		"kubelet":                 {"system:node:" + o.NodeName, []string{"system:nodes"}},
		"coredns":                 {"system:coredns", nil}, // bound to its ClusterRole by Start
	}
	certs := map[string]certPair{}
	kubeconfigs := map[string]string{}
	f := nodeFiles{caFile: p.CAFile}
	f.apiURL = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	for name, cl := range clients {
		cp, err := p.issue("client-"+name, cl.cn, cl.orgs, nil, nil)
		if err != nil {
			return nodeFiles{}, err
		}
		certs[name] = cp
		kubeconfigs[name] = d("kubeconfig", name+".kubeconfig")
		if err := os.MkdirAll(d("kubeconfig"), 0o700); err != nil {
			return nodeFiles{}, err
		}
		if err := writeKubeconfig(kubeconfigs[name], f.apiURL, p.CAFile, cp); err != nil {
			return nodeFiles{}, err
		}
	}
	f.admin = certs["admin"]
	c.kubeconfig = kubeconfigs["admin"]
	c.ctrdSock = d("containerd", "containerd.sock")

	f.etcdURL = "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	f.etcdArgs = []string{
		"--name=spikehunt", "--data-dir=" + d("etcd"),
		"--listen-client-urls=" + f.etcdURL, "--advertise-client-urls=" + f.etcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=spikehunt=" + peerURL,
		// A test node's data is thrown away at Stop: do not wait on the disk
		// the other engineers' builds share.
		"--unsafe-no-fsync",
	}

	f.apiserverArgs = []string{
		"--etcd-servers=" + f.etcdURL,
		"--bind-address=0.0.0.0", "--secure-port=" + strconv.Itoa(apiPort),
		"--advertise-address=" + c.nodeIP,
		"--tls-cert-file=" + apiServing.Cert, "--tls-private-key-file=" + apiServing.Key,
		"--client-ca-file=" + p.CAFile,
		"--kubelet-client-certificate=" + certs["apiserver-kubelet"].Cert, "--kubelet-client-key=" + certs["apiserver-kubelet"].Key,
		"--kubelet-certificate-authority=" + p.CAFile,
		// The node's name is not in DNS; its address is.
		"--kubelet-preferred-address-types=InternalIP",
		"--service-cluster-ip-range=" + o.ServiceCIDR,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.SAPub, "--service-account-signing-key-file=" + p.SAKey,
		"--authorization-mode=Node,RBAC",
		// The default plugins plus NodeRestriction, as local-up-cluster.sh and
		// kubeadm enable them.
		"--enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultStorageClass,DefaultTolerationSeconds,Priority,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ResourceQuota,NodeRestriction,PodSecurity",
		"--allow-privileged=true",
		"--profiling=false",
	}

	f.controllerManagerArgs = []string{
		"--kubeconfig=" + kubeconfigs["kube-controller-manager"],
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + p.SAKey,
		"--root-ca-file=" + p.CAFile,
		"--cluster-signing-cert-file=" + p.CAFile, "--cluster-signing-key-file=" + p.CAKey,
		"--service-cluster-ip-range=" + o.ServiceCIDR,
		"--leader-elect=false",
		// Its health is read from what it makes (the default ServiceAccount
		// and kube-root-ca.crt), not from a port.
		"--secure-port=0",
	}
	f.schedulerArgs = []string{
		"--kubeconfig=" + kubeconfigs["kube-scheduler"],
		"--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(schedPort),
	}
	f.schedulerHealthz = "https://127.0.0.1:" + strconv.Itoa(schedPort) + "/healthz"

	nf, err := writeNodeConfigs(nodeConfig{
		dir: c.dir, name: o.NodeName, ip: c.nodeIP, podCIDR: o.PodCIDR, cgroup: c.host.Cgroup,
		kubeletPort: kubeletPort, kubeletHealthz: kubeletHealthz,
		proxyHealthz: "127.0.0.1:" + strconv.Itoa(proxyHealthz), proxyMetrics: "127.0.0.1:" + strconv.Itoa(proxyMetrics),
		caFile: p.CAFile, kubeletServing: kubeletServing, kubeletKubeconfig: kubeconfigs["kubelet"], proxyKubeconfig: kubeconfigs["kube-proxy"],
		dnsServiceIP: dnsSvcIP.String(), podLogsDir: d("logs", "pods"), ctrdSock: c.ctrdSock,
	})
	if err != nil {
		return nodeFiles{}, err
	}
	f.kubeletArgs, f.proxyConfig, f.containerdConfig = nf.kubeletArgs, nf.proxyConfig, nf.containerdConfig
	f.proxyHealthz = "http://127.0.0.1:" + strconv.Itoa(proxyHealthz) + "/healthz"

	// CoreDNS runs on the host, on the node IP: pods reach it through the
	// kube-dns Service (dnsSvcIP:53), whose EndpointSlice Start writes.
	f.dnsPort, f.dnsServiceIP = dnsPort, dnsSvcIP.String()
	f.dnsReady = "http://127.0.0.1:" + strconv.Itoa(dnsReady) + "/ready"
	f.corefile = d("Corefile")
	if err := os.WriteFile(f.corefile, fmt.Appendf(nil, `.:%d {
    bind %s
    errors
    health 127.0.0.1:%d
    ready 127.0.0.1:%d
    kubernetes %s in-addr.arpa ip6.arpa {
        kubeconfig %s spikehunt-test
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    forward . /etc/resolv.conf
    cache 30
}
`, dnsPort, c.nodeIP, dnsHealth, dnsReady, ClusterDomain, kubeconfigs["coredns"]), 0o644); err != nil {
		return nodeFiles{}, err
	}

	return f, nil
}

// capSysResource is CAP_SYS_RESOURCE's number (linux/capability.h).
const capSysResource = 24

// hasCapability reports whether capability n is in this process's
// effective set.
func hasCapability(n uint) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<n) != 0
		}
	}
	return false
}
