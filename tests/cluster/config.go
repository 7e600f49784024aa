package cluster

import (
	"errors"
	"fmt"
	"net"
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
	// Logf receives one line per started component with its start time.
	// Nil: standard error.
	Logf func(format string, args ...any)
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
	if o.StartTimeout < 30*time.Second {
		errs = append(errs, fmt.Errorf("StartTimeout %s is under 30s: a loaded 2-core machine needs about a minute", o.StartTimeout))
	}
	return errors.Join(errs...)
}
