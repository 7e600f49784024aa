package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/agents/telemetry"
)

// resolveResource fills the host's identity: the configured values, else
// the hostname, $NODE_NAME, $SPIKEHUNT_HW_CLASS, and finally the hardware
// class label of this node read from the Kubernetes API (in a cluster).
func resolveResource(ctx context.Context, c ResourceConfig, log *slog.Logger) (telemetry.Resource, error) {
	r := telemetry.Resource{HostName: c.HostName, NodeName: c.NodeName, HWClass: c.HWClass}
	if r.HostName == "" {
		h, err := os.Hostname()
		if err != nil {
			return r, fmt.Errorf("host name: %w (set resource.host_name)", err)
		}
		r.HostName = h
	}
	if r.NodeName == "" {
		r.NodeName = os.Getenv("NODE_NAME")
	}
	if r.HWClass == "" {
		r.HWClass = os.Getenv("SPIKEHUNT_HW_CLASS")
	}
	if r.HWClass == "" && r.NodeName != "" && c.HWClassLabel != "" {
		cfg, err := rest.InClusterConfig()
		if err == nil {
			cls, err := nodeLabel(ctx, cfg, r.NodeName, c.HWClassLabel)
			if err != nil {
				log.Warn("hardware class from node label", "node", r.NodeName, "label", c.HWClassLabel, "err", err)
			}
			r.HWClass = cls
		}
	}
	if r.NodeName == "" {
		r.NodeName = r.HostName
	}
	return r, nil
}

// nodeLabel reads one label of a Node.
func nodeLabel(ctx context.Context, cfg *rest.Config, node, label string) (string, error) {
	cl, err := client.New(cfg, client.Options{})
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var n corev1.Node
	if err := cl.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
		return "", err
	}
	return n.Labels[label], nil
}
