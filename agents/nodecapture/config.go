package nodecapture

import (
	"errors"
	"log/slog"
	"time"

	"k8s.io/client-go/rest"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/internal/defaults"
)

// Config configures a Watcher.
type Config struct {
	// Node is this node's name (the DaemonSet's spec.nodeName through
	// the downward API): the Watcher sees only the Captures whose
	// spec.nodeName it is.
	Node string
	// REST reaches the API server as the agent's ServiceAccount, which
	// may list, watch and get Captures and patch their status, no more.
	REST *rest.Config
	// Engine arms the node's recorders. The Watcher registers itself
	// with Engine.OnChange, and disarms what it armed when it stops.
	Engine *capture.Engine
	// StopTimeout bounds the reports a stopping Watcher writes for the
	// captures it disarms (default 5s).
	StopTimeout time.Duration
	Log         *slog.Logger
	// Now stamps the conditions' transition times (default time.Now).
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	defaults.Fill(&c.StopTimeout, 5*time.Second)
	defaults.Fill(&c.Log, slog.New(slog.DiscardHandler))
	if c.Now == nil { // a func is not comparable: Fill cannot take it
		c.Now = time.Now
	}
	return c
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.Node == "":
		return errors.New("nodecapture: the node name is empty (set resource.node_name or $NODE_NAME)")
	case c.REST == nil:
		return errors.New("nodecapture: no Kubernetes API configuration")
	case c.Engine == nil:
		return errors.New("nodecapture: no capture engine")
	case c.StopTimeout < 0:
		return errors.New("nodecapture: negative stop timeout")
	}
	return nil
}
