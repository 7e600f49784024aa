package podwatch

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spikehunt/spikehunt/internal/defaults"
)

// The in-cluster ServiceAccount files every pod that mounts its token has.
const (
	DefaultTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	DefaultCAFile    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// Bounds of the cache and of what one response may make the agent read.
const (
	// DefaultMaxPods is far above the kubelet's default of 110 pods a node
	// and its documented ceiling of 250 (a cluster may raise it further).
	DefaultMaxPods = 1000
	MaxMaxPods     = 100_000
	// DefaultMaxEventBytes bounds one watch event. A pod object is a few
	// KiB, tens with many containers and long annotations; etcd refuses
	// objects over 1.5 MiB by default, so a bigger event is not a pod.
	DefaultMaxEventBytes = 2 << 20
	// DefaultMaxListBytes bounds one page of the list (at most
	// listPageSize pods).
	DefaultMaxListBytes = 64 << 20
	// MaxContainersPerPod bounds the container ids kept for one pod;
	// those beyond are counted as dropped.
	MaxContainersPerPod = 128
)

// ErrNotInCluster is returned by InCluster outside a Kubernetes pod.
var ErrNotInCluster = errors.New("podwatch: not in a Kubernetes cluster: $KUBERNETES_SERVICE_HOST and $KUBERNETES_SERVICE_PORT are not set")

// Config configures a Watcher. InCluster fills the connection for a pod;
// tests set Server and HTTPClient.
type Config struct {
	// Node is this node's name: only pods whose spec.nodeName it is are
	// listed and watched (a field selector the API server applies).
	Node string
	// Server is the API server's base URL, https://host:port.
	Server string
	// HTTPClient carries the requests; nil builds one that trusts CAFile.
	// It must not have a Timeout: a watch is a long request.
	HTTPClient *http.Client
	// CAFile is the API server's CA bundle (used when HTTPClient is nil).
	CAFile string
	// TokenFile holds the bearer token, re-read as the kubelet rotates it;
	// empty sends none (HTTPClient authenticates).
	TokenFile string
	// MaxPods bounds the pods kept; more are counted as dropped. Default
	// DefaultMaxPods, at most MaxMaxPods.
	MaxPods int
	// MaxEventBytes and MaxListBytes bound what one watch event and one
	// list page may make the agent read; beyond, the stream is cut with
	// ErrTooLarge and the watch starts again from a fresh list.
	MaxEventBytes int64
	MaxListBytes  int64
	// MinBackoff and MaxBackoff bound the wait between attempts while the
	// API server cannot be reached (doubling, with jitter). Default 500ms
	// and 30s.
	MinBackoff, MaxBackoff time.Duration
	// WatchTimeout is how long one watch request lasts before the API
	// server ends it and the Watcher starts the next (default 5m, with up
	// to as much again of jitter, so a fleet's agents do not reconnect in
	// step).
	WatchTimeout time.Duration
	// Log receives the watch's errors, once per change of state; nil
	// discards them.
	Log *slog.Logger
}

// InCluster returns the Config of an agent running in a pod: the API
// server from $KUBERNETES_SERVICE_HOST and $KUBERNETES_SERVICE_PORT, the
// ServiceAccount token and CA the kubelet mounts. It fails with
// ErrNotInCluster outside a cluster, and when the token is not mounted.
func InCluster(node string) (Config, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return Config{}, ErrNotInCluster
	}
	if _, err := os.Stat(DefaultTokenFile); err != nil {
		return Config{}, fmt.Errorf("podwatch: the ServiceAccount token is not mounted (automountServiceAccountToken): %w", err)
	}
	return Config{
		Node:      node,
		Server:    "https://" + net.JoinHostPort(host, port),
		CAFile:    DefaultCAFile,
		TokenFile: DefaultTokenFile,
	}, nil
}

// WithDefaults returns c with its zero fields given their defaults.
func (c Config) WithDefaults() Config {
	defaults.Fill(&c.MaxPods, DefaultMaxPods)
	defaults.Fill(&c.MaxEventBytes, DefaultMaxEventBytes)
	defaults.Fill(&c.MaxListBytes, DefaultMaxListBytes)
	defaults.Fill(&c.MinBackoff, 500*time.Millisecond)
	defaults.Fill(&c.MaxBackoff, 30*time.Second)
	defaults.Fill(&c.WatchTimeout, 5*time.Minute)
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate checks c as New would use it; it does not change c.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	if c.Node == "" {
		errs = append(errs, errors.New("podwatch: the node name is empty (set resource.node_name or $NODE_NAME from spec.nodeName)"))
	}
	if c.Server == "" {
		errs = append(errs, errors.New("podwatch: no API server URL"))
	}
	if c.HTTPClient == nil && c.CAFile == "" {
		errs = append(errs, errors.New("podwatch: neither an HTTP client nor a CA file"))
	}
	if c.HTTPClient != nil && c.HTTPClient.Timeout != 0 {
		errs = append(errs, errors.New("podwatch: the HTTP client has a Timeout, which would cut every watch"))
	}
	if c.MaxPods < 1 || c.MaxPods > MaxMaxPods {
		errs = append(errs, fmt.Errorf("podwatch: MaxPods %d: must be 1 to %d", c.MaxPods, MaxMaxPods))
	}
	if c.MaxEventBytes < 4<<10 || c.MaxListBytes < c.MaxEventBytes {
		errs = append(errs, fmt.Errorf("podwatch: MaxEventBytes %d must be at least 4 KiB and MaxListBytes %d at least that", c.MaxEventBytes, c.MaxListBytes))
	}
	if c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff {
		errs = append(errs, fmt.Errorf("podwatch: backoff %v to %v: want 0 < min <= max", c.MinBackoff, c.MaxBackoff))
	}
	if c.WatchTimeout < time.Second {
		errs = append(errs, fmt.Errorf("podwatch: WatchTimeout %v: at least 1s", c.WatchTimeout))
	}
	return errors.Join(errs...)
}
