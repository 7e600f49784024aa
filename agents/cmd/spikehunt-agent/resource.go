package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"k8s.io/client-go/rest"

	"github.com/spikehunt/spikehunt/internal/telemetry"
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
		if cfg, err := rest.InClusterConfig(); err == nil {
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

// nodeLabel reads one label of a Node with a plain GET: the agent needs
// one string, not client-go's typed clients and their scheme in memory.
func nodeLabel(ctx context.Context, cfg *rest.Config, node, label string) (string, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	base, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return "", err
	}
	u := base.JoinPath("api", "v1", "nodes", node) // JoinPath escapes
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET node %s: %s", node, resp.Status)
	}
	var n struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&n); err != nil {
		return "", fmt.Errorf("GET node %s: %w", node, err)
	}
	return n.Metadata.Labels[label], nil
}
