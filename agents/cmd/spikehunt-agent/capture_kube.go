package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/agents/nodecapture"
)

// CaptureKubeConfig connects the capture engine to the Capture API: the
// agent arms the Captures whose spec.nodeName is its node
// (resource.node_name, $NODE_NAME) and reports their status
// (agents/nodecapture).
type CaptureKubeConfig struct {
	// Enabled: unset watches when the agent runs in a cluster with its
	// ServiceAccount token mounted, or Kubeconfig is set; true fails the
	// start when neither works; false never watches.
	Enabled *bool `yaml:"enabled"`
	// Kubeconfig is a kubeconfig file for an agent outside the cluster;
	// empty uses the in-cluster ServiceAccount (spikehunt-agent in
	// operator/config/rbac).
	Kubeconfig string `yaml:"kubeconfig"`
}

// startCaptureWatcher runs the node's Capture watcher over eng until ctx
// ends. The returned stop waits for the watcher to disarm and report its
// captures: call it before the engine closes. A host without the engine,
// or an agent neither in a cluster nor configured for one, runs without
// it.
func startCaptureWatcher(ctx context.Context, kc CaptureKubeConfig, eng *capture.Engine, node string, nodeGiven bool,
	log *slog.Logger, reg prometheus.Registerer) (func(), error) {
	noop := func() {}
	if kc.Enabled != nil && !*kc.Enabled {
		return noop, nil
	}
	if eng == nil {
		if kc.Enabled != nil || kc.Kubeconfig != "" || os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
			log.Warn("capture.kube: the capture engine is off on this host: this node's Captures stay Pending", "node", node)
		}
		return noop, nil
	}
	var cfg *rest.Config
	var err error
	if kc.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kc.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	auto := kc.Enabled == nil && kc.Kubeconfig == ""
	switch {
	case auto && errors.Is(err, rest.ErrNotInCluster):
		return noop, nil // not in a cluster and not asked to: off
	case auto && err != nil:
		log.Warn("capture.kube: in a cluster without the agent's ServiceAccount token: this node's Captures stay Pending (mount the token, or set capture.kube.enabled: false)", "err", err)
		return noop, nil
	case err != nil:
		return nil, fmt.Errorf("capture.kube: %w", err)
	}
	if !nodeGiven {
		log.Warn("capture.kube: the node name is the host name; set $NODE_NAME from spec.nodeName (the downward API) or resource.node_name if they differ", "node", node)
	}
	w, err := nodecapture.New(nodecapture.Config{Node: node, REST: cfg, Engine: eng, Log: log})
	if err != nil {
		return nil, fmt.Errorf("capture.kube: %w", err)
	}
	if err := w.Register(reg); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.Run(ctx); err != nil {
			log.Warn("capture.kube: not every disarmed capture's status was written", "err", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}

func (c CaptureKubeConfig) validate() error {
	if c.Kubeconfig == "" {
		return nil
	}
	if _, err := os.Stat(c.Kubeconfig); err != nil {
		return fmt.Errorf("capture.kube.kubeconfig: %w", err)
	}
	return nil
}
