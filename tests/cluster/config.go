package cluster

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"time"
)

// Options configures Start. The zero value is not valid: start from
// DefaultOptions.
type Options struct {
	// Dir holds the node's state (etcd data, containerd's root and state,
	// the kubelet's root, certificates, kubeconfigs) and its logs/. Empty:
	// a new folder under os.TempDir(). Stop removes it, except logs/ when
	// KeepLogs is set.
	Dir string
	// KeepLogs keeps Dir/logs after Stop, for a failed run's post-mortem.
	KeepLogs bool
	// NodeIP is the address the node registers with: the kubelet's
	// --node-ip, the API server's advertised address (the kubernetes
	// Service's endpoint) and the address pods reach the host on. Empty:
	// the IPv4 address of the interface that holds the default route.
	// Pods cannot reach the host's 127.0.0.1: a host service for pods must
	// listen on NodeIP (or 0.0.0.0).
	NodeIP string
	// NodeName is the Node object's name.
	NodeName string
	// PodCIDR is the bridge network the pods get addresses from.
	PodCIDR string
	// ServiceCIDR is the ClusterIP range; its first address is the
	// kubernetes Service.
	ServiceCIDR string
	// Images are OCI archives imported into containerd before Start
	// returns, besides the pause image Start builds itself.
	Images []string
	// StartTimeout bounds Start once it holds the host lock, from the first
	// process to a Ready node.
	StartTimeout time.Duration
	// NetworkPolicy runs a NetworkPolicy engine on the node,
	// kube-network-policies (deps/install.sh kube-network-policies): Start
	// returns once it enforces. Without it the bridge network accepts
	// NetworkPolicies and applies none.
	NetworkPolicy bool
	// Nodes are more nodes, each in a network namespace of its own with its
	// own containerd, kubelet, kube-proxy and pod network (README.md, "More
	// nodes"). The first node runs the control plane and is NodeName.
	Nodes []NodeOptions
	// Logf receives one line per started component with its start time.
	// Nil: standard error.
	Logf func(format string, args ...any)
}

// NodeOptions configures one node of Options.Nodes.
type NodeOptions struct {
	// Name is the Node object's name.
	Name string
	// PodCIDR is the node's pod network; the host routes it to the node.
	PodCIDR string
	// Link is the /30 that joins the node's network namespace to the host:
	// the host's end has its first address, the node its second, which is
	// the node's IP.
	Link string
	// Private are host folders the node sees as its own (an empty folder
	// under the node's state, bind-mounted in the node's mount namespace):
	// the folders a DaemonSet keeps per-node state in through hostPath,
	// which two nodes on one host would otherwise share.
	Private []string
}

// SecondNode is a second node beside DefaultOptions' first: pods in
// 10.244.1.0/24, its address 10.245.0.2, and /var/lib/spikehunt and
// /run/spikehunt (the agent's spool, captures and line socket) its own.
func SecondNode() NodeOptions {
	return NodeOptions{Name: "spikehunt-node-b", PodCIDR: "10.244.1.0/24", Link: "10.245.0.0/30",
		Private: []string{"/var/lib/spikehunt", "/run/spikehunt"}}
}

// DefaultOptions is a node on the default route's address, Services in
// 10.0.0.0/24 as in local-up-cluster.sh, and pods in 10.244.0.0/24, off the
// ranges of containerd's example network (10.88/16) and Docker (172.17/16)
// that a build machine may also run.
func DefaultOptions() Options {
	return Options{
		NodeName:     "spikehunt-node",
		PodCIDR:      "10.244.0.0/24",
		ServiceCIDR:  "10.0.0.0/24",
		StartTimeout: 4 * time.Minute,
	}
}

var nodeNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// Validate reports every problem of o; it never changes o.
func (o Options) Validate() error {
	var errs []error
	if !nodeNameRE.MatchString(o.NodeName) {
		errs = append(errs, fmt.Errorf("NodeName %q is not a DNS label (lower-case letters, digits and '-', at most 63)", o.NodeName))
	}
	if o.NodeIP != "" {
		if ip := net.ParseIP(o.NodeIP); ip == nil || ip.To4() == nil || ip.IsLoopback() {
			errs = append(errs, fmt.Errorf("NodeIP %q must be a non-loopback IPv4 address of this host: pods reach the host there", o.NodeIP))
		}
	}
	_, pods, err := net.ParseCIDR(o.PodCIDR)
	if err != nil || pods.IP.To4() == nil {
		errs = append(errs, fmt.Errorf("PodCIDR %q must be an IPv4 CIDR like 10.244.0.0/24", o.PodCIDR))
	}
	_, svcs, err2 := net.ParseCIDR(o.ServiceCIDR)
	if err2 != nil || svcs.IP.To4() == nil {
		errs = append(errs, fmt.Errorf("ServiceCIDR %q must be an IPv4 CIDR like 10.0.0.0/24", o.ServiceCIDR))
	} else if ones, _ := svcs.Mask.Size(); ones > 28 {
		errs = append(errs, fmt.Errorf("ServiceCIDR %q is too small: give at least a /28", o.ServiceCIDR))
	}
	if err == nil && err2 == nil && (pods.Contains(svcs.IP) || svcs.Contains(pods.IP)) {
		errs = append(errs, fmt.Errorf("PodCIDR %s and ServiceCIDR %s overlap", o.PodCIDR, o.ServiceCIDR))
	}
	nets := []*net.IPNet{}
	if err == nil {
		nets = append(nets, pods)
	}
	if err2 == nil {
		nets = append(nets, svcs)
	}
	names := map[string]bool{o.NodeName: true}
	for i, n := range o.Nodes {
		if !nodeNameRE.MatchString(n.Name) || names[n.Name] {
			errs = append(errs, fmt.Errorf("Nodes[%d].Name %q is not a DNS label, or not unique", i, n.Name))
		}
		names[n.Name] = true
		for _, f := range []struct{ what, cidr string }{{"PodCIDR", n.PodCIDR}, {"Link", n.Link}} {
			_, cn, err := net.ParseCIDR(f.cidr)
			if err != nil || cn.IP.To4() == nil {
				errs = append(errs, fmt.Errorf("Nodes[%d].%s %q must be an IPv4 CIDR", i, f.what, f.cidr))
				continue
			}
			if ones, _ := cn.Mask.Size(); f.what == "Link" && ones != 30 {
				errs = append(errs, fmt.Errorf("Nodes[%d].Link %q must be a /30", i, f.cidr))
			}
			for _, other := range nets {
				if other.Contains(cn.IP) || cn.Contains(other.IP) {
					errs = append(errs, fmt.Errorf("Nodes[%d].%s %s overlaps %s", i, f.what, f.cidr, other))
				}
			}
			nets = append(nets, cn)
		}
		for _, p := range n.Private {
			if !filepath.IsAbs(p) || filepath.Clean(p) == "/" {
				errs = append(errs, fmt.Errorf("Nodes[%d].Private %q must be an absolute folder other than /", i, p))
			}
		}
	}
	if o.StartTimeout < 30*time.Second {
		errs = append(errs, fmt.Errorf("StartTimeout %s is under 30s: a loaded 2-core machine needs about a minute", o.StartTimeout))
	}
	return errors.Join(errs...)
}
