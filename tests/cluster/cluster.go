//go:build linux

package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// ErrNotPrivileged is returned by Start when the process is not root: a
// node needs cgroups, network namespaces, mounts and iptables.
var ErrNotPrivileged = errors.New("cluster: a Kubernetes node needs root (cgroups, network namespaces, mounts, iptables)")

// PauseImage is the sandbox image Start builds from the k8s.io/kubernetes
// module's build/pause and sets as containerd's sandbox_image.
const PauseImage = "spikehunt.local/pause:3.10.1"

// ClusterDomain is the cluster's DNS domain: a Service is
// <name>.<namespace>.svc.cluster.local.
const ClusterDomain = "cluster.local"

// bridgeName is the CNI bridge. kube-proxy's chains are host-wide, so one
// node runs per host at a time (hostLock), and the name can be fixed.
const bridgeName = "spikehunt0"

// hostLock serializes nodes across test binaries; it names the folder of
// the node that holds it, so that the next Start can clean up after a test
// binary that died without Stop.
const hostLock = "/run/lock/spikehunt-cluster.lock"

// Cluster is a running Kubernetes, one node or more. Stop it; until then its
// processes, pods, cgroups, mounts, bridge and iptables rules stay.
type Cluster struct {
	opts       Options
	dir        string
	logDir     string
	nodeIP     string
	kubeconfig string
	ctrdSock   string
	ctr        string
	host       *hostState
	lock       *os.File
	comps      []*component
	timings    []Timing
	volumes    int // PersistentVolumes AddVolumes made

	// For the nodes of Options.Nodes, set by writeFiles.
	pki          *pki
	apiPort      int
	dnsServiceIP string
	nodes        []*extraNode
	imported     []string // image archives, for the nodes added after

	stopOnce sync.Once
	stopErr  error
}

// Timing is how long a component took to become ready, from the start of
// its process, and when it was ready, from the start of Start.
type Timing struct {
	Component string
	Ready     time.Duration
	At        time.Duration
}

// binaries are the node's programs, found before anything starts.
type binaries struct {
	etcd, apiserver, controllerManager, scheduler, kubelet, proxy, pause, coredns string
	containerd, ctr                                                               string
	policyEngine                                                                  string // with Options.NetworkPolicy
}

func findBinaries(networkPolicy bool) (binaries, error) {
	paths, err := testenv.Paths()
	if err != nil {
		return binaries{}, err
	}
	assets, err := paths.EnvtestAssetsDir()
	if err != nil {
		return binaries{}, err
	}
	node, err := paths.KubeNodeDir()
	if err != nil {
		return binaries{}, err
	}
	b := binaries{
		etcd:              filepath.Join(assets, "etcd"),
		apiserver:         filepath.Join(assets, "kube-apiserver"),
		controllerManager: filepath.Join(node, "kube-controller-manager"),
		scheduler:         filepath.Join(node, "kube-scheduler"),
		kubelet:           filepath.Join(node, "kubelet"),
		proxy:             filepath.Join(node, "kube-proxy"),
		pause:             filepath.Join(node, "pause"),
		coredns:           filepath.Join(node, "coredns"),
	}
	var missing []string
	if networkPolicy {
		if b.policyEngine, err = paths.KubeNetworkPoliciesBinary(); err != nil {
			return binaries{}, err
		}
		if _, err := exec.LookPath("nft"); err != nil {
			missing = append(missing, "nft (Debian package nftables)")
		}
	}
	for _, p := range []string{b.etcd, b.apiserver, b.controllerManager, b.scheduler, b.kubelet, b.proxy, b.pause, b.coredns} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	tools := map[string]*string{"containerd": &b.containerd, "ctr": &b.ctr}
	for _, t := range []string{"containerd", "ctr", "containerd-shim-runc-v2", "runc", "iptables", "ip6tables", "iptables-save", "iptables-restore", "conntrack", "ip"} {
		p, err := exec.LookPath(t)
		if err != nil {
			if p, err = exec.LookPath("/usr/sbin/" + t); err != nil {
				missing = append(missing, t)
				continue
			}
		}
		if dst := tools[t]; dst != nil {
			*dst = p
		}
	}
	for _, p := range []string{"bridge", "host-local", "portmap", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, p)); err != nil {
			missing = append(missing, filepath.Join(cniBinDir, p))
		}
	}
	if len(missing) > 0 {
		return binaries{}, fmt.Errorf("cluster: missing %s: run `deps/install.sh kube-node` as root (it builds the node binaries and installs containerd, runc, the CNI plugins and iptables from Debian)", strings.Join(missing, ", "))
	}
	return b, nil
}

// cniBinDir is where Debian's containernetworking-plugins installs.
const cniBinDir = "/usr/lib/cni"

// Start runs a one-node cluster: etcd, kube-apiserver, containerd with its
// own config, root, state and socket under Dir, kube-controller-manager,
// kube-scheduler, the kubelet and kube-proxy (iptables mode). It returns
// when the node is Ready, kube-proxy has synced, the default ServiceAccount
// and the kube-root-ca.crt ConfigMap exist, and the pause image and
// opts.Images are imported. On error nothing is left running.
//
// One node runs per host at a time: Start waits for the host lock while
// another test binary's node runs, until ctx ends; StartTimeout counts
// from when it has the lock.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("cluster: options: %w", err)
	}
	if os.Geteuid() != 0 {
		return nil, ErrNotPrivileged
	}
	bins, err := findBinaries(opts.NetworkPolicy)
	if err != nil {
		return nil, err
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "cluster: "+format+"\n", args...) }
	}
	// Waiting for another test binary's node (make test runs packages in
	// parallel) does not count against StartTimeout: only ctx bounds it.
	lock, err := lockHost(ctx, logf)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	c := &Cluster{opts: opts, lock: lock, ctr: bins.ctr}
	fail := func(err error) (*Cluster, error) {
		if stopErr := c.Stop(); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("and cleaning up: %w", stopErr))
		}
		return nil, err
	}
	if c.dir = opts.Dir; c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "spikehunt-cluster-"); err != nil {
			return fail(fmt.Errorf("cluster: %w", err))
		}
	}
	c.logDir = filepath.Join(c.dir, "logs")
	for _, d := range []string{c.logDir, filepath.Join(c.dir, "cni", "net.d"), filepath.Join(c.dir, "containerd")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fail(fmt.Errorf("cluster: %w", err))
		}
	}
	if _, err := lock.WriteAt([]byte(c.dir+"\n"), 0); err != nil {
		return fail(fmt.Errorf("cluster: write %s: %w", hostLock, err))
	}
	if c.nodeIP = opts.NodeIP; c.nodeIP == "" {
		if c.nodeIP, err = defaultRouteIP(); err != nil {
			return fail(err)
		}
	}
	cgroup := "/spikehunt-" + strconv.Itoa(os.Getpid())
	nftable := ""
	if opts.NetworkPolicy {
		nftable = policyTable
	}
	if c.host, err = recordHostState(c.dir, cgroup, bridgeName, opts.PodCIDR, nftable); err != nil {
		return fail(fmt.Errorf("cluster: record the host's state: %w", err))
	}
	if err := makeCgroupRoot(cgroup); err != nil {
		return fail(fmt.Errorf("cluster: %w", err))
	}
	if err := writeSysctl("net/ipv4/ip_forward", "1"); err != nil {
		return fail(fmt.Errorf("cluster: enable IPv4 forwarding for pod traffic: %w", err))
	}
	// A ClusterIP kube-proxy has not (yet) translated must not leave the
	// host by its default route: a test's traffic stays on this host.
	if err := rejectUntranslatedServices(opts.ServiceCIDR); err != nil {
		return fail(fmt.Errorf("cluster: %w", err))
	}
	logf("state in %s, logs in %s, node IP %s", c.dir, c.logDir, c.nodeIP)

	began := time.Now()
	files, err := c.writeFiles()
	if err != nil {
		return fail(fmt.Errorf("cluster: %w", err))
	}
	ready := func(comp *component, since time.Time) {
		t := Timing{Component: comp.name, Ready: time.Since(since).Round(time.Millisecond), At: time.Since(began).Round(time.Millisecond)}
		c.timings = append(c.timings, t)
		logf("%s ready in %s (%s after start)", t.Component, t.Ready, t.At)
	}
	start := func(name, bin string, args ...string) (*component, time.Time, error) {
		comp, err := startComponent(c.logDir, name, bin, args...)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("cluster: %w", err)
		}
		c.comps = append(c.comps, comp)
		if err := joinRuntimeCgroup(cgroup, comp.cmd.Process.Pid); err != nil {
			return nil, time.Time{}, fmt.Errorf("cluster: %w", err)
		}
		return comp, time.Now(), nil
	}

	// etcd and containerd do not depend on each other: start both first.
	etcd, etcdT, err := start("etcd", bins.etcd, files.etcdArgs...)
	if err != nil {
		return fail(err)
	}
	ctrd, ctrdT, err := start("containerd", bins.containerd, "--config", files.containerdConfig)
	if err != nil {
		return fail(err)
	}
	if err := waitFor(ctx, etcd, "etcd /health", func() error { return httpOK(http.DefaultClient, files.etcdURL+"/health") }); err != nil {
		return fail(err)
	}
	ready(etcd, etcdT)
	api, apiT, err := start("kube-apiserver", bins.apiserver, files.apiserverArgs...)
	if err != nil {
		return fail(err)
	}
	if err := waitFor(ctx, ctrd, "containerd", func() error { return c.runCtr(ctx, "version") }); err != nil {
		return fail(err)
	}
	pauseArchive := filepath.Join(c.dir, "images", "pause.oci.tar")
	pause, err := os.ReadFile(bins.pause)
	if err == nil {
		err = WriteImageArchive(pauseArchive, Image{Name: PauseImage, Files: []ImageFile{{Path: "/pause", Mode: 0o755, Data: pause}},
			Entrypoint: []string{"/pause"}, User: "65535:65535"})
	}
	if err == nil {
		err = c.ImportImage(ctx, pauseArchive)
	}
	if err != nil {
		return fail(fmt.Errorf("cluster: pause image: %w", err))
	}
	ready(ctrd, ctrdT)
	adminHTTP, err := files.adminHTTPClient()
	if err != nil {
		return fail(err)
	}
	if err := waitFor(ctx, api, "kube-apiserver /readyz", func() error { return httpOK(adminHTTP, files.apiURL+"/readyz") }); err != nil {
		return fail(err)
	}
	ready(api, apiT)

	cm, cmT, err := start("kube-controller-manager", bins.controllerManager, files.controllerManagerArgs...)
	if err != nil {
		return fail(err)
	}
	sched, schedT, err := start("kube-scheduler", bins.scheduler, files.schedulerArgs...)
	if err != nil {
		return fail(err)
	}
	kubelet, kubeletT, err := start("kubelet", bins.kubelet, files.kubeletArgs...)
	if err != nil {
		return fail(err)
	}
	proxy, proxyT, err := start("kube-proxy", bins.proxy, "--config", files.proxyConfig)
	if err != nil {
		return fail(err)
	}
	cs, err := c.clientset()
	if err != nil {
		return fail(err)
	}
	if err := waitFor(ctx, api, "the kube-dns Service, CoreDNS's permissions and the default StorageClass", func() error {
		if err := createStorageClass(ctx, cs); err != nil {
			return err
		}
		return createClusterDNSObjects(ctx, cs, files.dnsServiceIP, c.nodeIP, files.dnsPort)
	}); err != nil {
		return fail(err)
	}
	dns, dnsT, err := start("coredns", bins.coredns, "-conf", files.corefile)
	if err != nil {
		return fail(err)
	}
	for _, img := range opts.Images {
		if err := c.ImportImage(ctx, img); err != nil {
			return fail(err)
		}
	}
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // its self-signed serving cert; /healthz only
	if err := waitFor(ctx, sched, "kube-scheduler /healthz", func() error { return httpOK(insecure, files.schedulerHealthz) }); err != nil {
		return fail(err)
	}
	ready(sched, schedT)
	if err := waitFor(ctx, cm, "the default ServiceAccount and the kube-root-ca.crt ConfigMap", func() error {
		if _, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return err
		}
		_, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err
	}); err != nil {
		return fail(err)
	}
	ready(cm, cmT)
	if err := waitFor(ctx, kubelet, "node "+opts.NodeName+" Ready", func() error { return nodeReady(ctx, cs, opts.NodeName) }); err != nil {
		return fail(err)
	}
	ready(kubelet, kubeletT)
	if err := waitFor(ctx, proxy, "kube-proxy /healthz", func() error { return httpOK(http.DefaultClient, files.proxyHealthz) }); err != nil {
		return fail(err)
	}
	ready(proxy, proxyT)
	if err := waitFor(ctx, dns, "CoreDNS /ready", func() error { return httpOK(http.DefaultClient, files.dnsReady) }); err != nil {
		return fail(err)
	}
	ready(dns, dnsT)
	if opts.NetworkPolicy {
		t0 := time.Now()
		if err := c.startPolicyEngine(ctx, cs, bins.policyEngine); err != nil {
			return fail(err)
		}
		t := Timing{Component: policyEngineName, Ready: time.Since(t0).Round(time.Millisecond), At: time.Since(began).Round(time.Millisecond)}
		c.timings = append(c.timings, t)
		logf("%s ready in %s (%s after start)", t.Component, t.Ready, t.At)
	}
	for i, n := range opts.Nodes {
		if err := c.addNode(ctx, i, n, bins, c.imported, cs, ready); err != nil {
			return fail(err)
		}
		logf("node %s (%s, pods %s) Ready %s after start", n.Name, c.nodes[i].ip, n.PodCIDR, time.Since(began).Round(time.Millisecond))
	}
	logf("node %s Ready %s after start (kubeconfig %s)", opts.NodeName, time.Since(began).Round(time.Millisecond), c.kubeconfig)
	return c, nil
}

// Kubeconfig is the path of an admin (system:masters) kubeconfig.
func (c *Cluster) Kubeconfig() string { return c.kubeconfig }

// RESTConfig is the admin kubeconfig's client configuration.
func (c *Cluster) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("cluster: load %s: %w", c.kubeconfig, err)
	}
	return cfg, nil
}

// NodeIP is the node's address: pods reach services on the host there
// (host services for pods must listen on it or on 0.0.0.0, not on
// 127.0.0.1), and it is status.hostIP of every pod.
func (c *Cluster) NodeIP() string { return c.nodeIP }

// ServiceCIDR is the node's ClusterIP range.
func (c *Cluster) ServiceCIDR() string { return c.opts.ServiceCIDR }

// NodeName is the Node object's name.
func (c *Cluster) NodeName() string { return c.opts.NodeName }

// Dir is the node's state folder (README.md lists what is in it).
func (c *Cluster) Dir() string { return c.dir }

// LogDir holds one log per component (etcd, kube-apiserver, containerd,
// kube-controller-manager, kube-scheduler, kubelet, kube-proxy, coredns)
// and the containers' logs under pods/.
func (c *Cluster) LogDir() string { return c.logDir }

// Timings are the components' start times, in the order they became ready.
func (c *Cluster) Timings() []Timing { return c.timings }

// ImportImage imports an OCI or Docker image archive into every node's
// containerd (namespace k8s.io, the kubelet's), unpacked for its
// snapshotter; a node of Options.Nodes gets it too when it is added later.
// Pods then run it by the name the archive carries, with
// imagePullPolicy IfNotPresent or Never. An OCI archive names its image in
// the manifest's io.containerd.image.name annotation, or with a full
// reference (registry/repo:tag) in org.opencontainers.image.ref.name; one
// whose ref.name is a bare tag (as the OCI spec words it) is refused:
// containerd would name it import-<date>:<tag>, which no pod asks for.
func (c *Cluster) ImportImage(ctx context.Context, archive string) error {
	c.imported = append(c.imported, archive)
	if err := c.importInto(ctx, c.ctrdSock, archive); err != nil {
		return err
	}
	for _, n := range c.nodes {
		if err := c.importInto(ctx, n.ctrdSock, archive); err != nil {
			return fmt.Errorf("node %s: %w", n.opts.Name, err)
		}
	}
	return nil
}

func (c *Cluster) importInto(ctx context.Context, sock, archive string) error {
	out, err := c.ctrAt(ctx, sock, "-n", "k8s.io", "images", "import", archive)
	if err != nil {
		return fmt.Errorf("cluster: import %s: %w", archive, err)
	}
	// ctr prints "unpacking NAME (sha256:...)...done" per image.
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "unpacking" && strings.HasPrefix(f[1], "import-") {
			return fmt.Errorf("cluster: import %s: the archive names its image only by a tag, so containerd named it %s: "+
				"put the full reference in the manifest's io.containerd.image.name annotation (or in org.opencontainers.image.ref.name)", archive, f[1])
		}
	}
	return nil
}

func (c *Cluster) runCtr(ctx context.Context, args ...string) error {
	_, err := c.ctrAt(ctx, c.ctrdSock, args...)
	return err
}

func (c *Cluster) ctrAt(ctx context.Context, sock string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, c.ctr, append([]string{"--address", sock}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func (c *Cluster) clientset() (*kubernetes.Clientset, error) {
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// lockHost takes the host lock, waiting while another node runs, and first
// cleans up after a node whose test binary died without Stop.
func lockHost(ctx context.Context, logf func(string, ...any)) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(hostLock), 0o755); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	f, err := os.OpenFile(hostLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	waiting := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("cluster: lock %s: %w", hostLock, err)
		}
		if !waiting {
			logf("another test binary's node holds %s; waiting", hostLock)
			waiting = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("cluster: waiting for %s, held by another test binary's node: %w", hostLock, ctx.Err())
		case <-time.After(time.Second):
		}
	}
	prev, _ := os.ReadFile(hostLock)
	if dir := strings.TrimSpace(string(prev)); dir != "" {
		if h, err := loadHostState(dir); err == nil {
			logf("cleaning up after a node that was not stopped (%s)", dir)
			if err := teardownHost(h, false); err != nil {
				f.Close()
				return nil, fmt.Errorf("cluster: clean up after the node in %s that was not stopped: %w", dir, err)
			}
		}
		_ = f.Truncate(0)
	}
	return f, nil
}
