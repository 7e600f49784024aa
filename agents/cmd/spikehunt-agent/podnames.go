package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spikehunt/spikehunt/agents/collect"
	"github.com/spikehunt/spikehunt/agents/podwatch"
)

// PodNamesConfig switches the pod watch that names the cgroup series of
// the node's pods (agents/podwatch).
type PodNamesConfig struct {
	// Enabled: unset watches when the agent runs in a cluster (the
	// ServiceAccount token mounted) and knows its node's name from
	// resource.node_name or $NODE_NAME; true fails the start when it
	// cannot; false never watches, and pods are shown by UID.
	Enabled *bool `yaml:"enabled"`
	// MaxPods bounds the pods whose names are kept (default
	// podwatch.DefaultMaxPods).
	MaxPods int `yaml:"max_pods"`
}

func (c PodNamesConfig) validate() error {
	if c.MaxPods < 0 || c.MaxPods > podwatch.MaxMaxPods {
		return fmt.Errorf("collect.pod_names.max_pods must be 0 (the default, %d) to %d", podwatch.DefaultMaxPods, podwatch.MaxMaxPods)
	}
	return nil
}

// startPodNames returns the cgroup sampler's PodNamer: the node's pod
// watch, running until ctx ends, or nil where it is off (the sampler then
// shows pods by UID). stop cancels the watch and waits for its goroutine.
func startPodNames(ctx context.Context, c PodNamesConfig, node string, nodeGiven bool, log *slog.Logger,
	reg prometheus.Registerer) (namer collect.PodNamer, stop func(), err error) {
	noop := func() {}
	if c.Enabled != nil && !*c.Enabled {
		return nil, noop, nil
	}
	required := c.Enabled != nil
	cfg, err := podwatch.InCluster(node)
	switch {
	case err != nil && required:
		return nil, nil, fmt.Errorf("collect.pod_names: %w", err)
	case errors.Is(err, podwatch.ErrNotInCluster):
		return nil, noop, nil // not in a cluster: nothing to name
	case err != nil:
		log.Warn("collect.pod_names: pods are shown by UID (or set collect.pod_names.enabled: false)", "err", err)
		return nil, noop, nil
	}
	if !nodeGiven {
		// The host name is not always the node's name, and a wrong one
		// would select no pod: name nothing rather than guess.
		if required {
			return nil, nil, errors.New("collect.pod_names: the node's name is unknown: set $NODE_NAME from spec.nodeName (the downward API) or resource.node_name")
		}
		log.Warn("collect.pod_names: pods are shown by UID: set $NODE_NAME from spec.nodeName (the downward API) or resource.node_name to name them")
		return nil, noop, nil
	}
	cfg.MaxPods, cfg.Log = c.MaxPods, log
	w, err := podwatch.New(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("collect.pod_names: %w", err)
	}
	if err := w.Register(reg); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx) // returns nil when ctx ends
	}()
	log.Info("naming the node's pods from a watch of the API server", "node", node)
	return w, func() { cancel(); <-done }, nil
}
