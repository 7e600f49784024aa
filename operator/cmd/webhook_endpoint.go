package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Only the leader serves the alert webhook (its inbox feeds the leader's
// controllers), but every replica is Ready: a standby that failed its
// readiness probe would stall each rolling update and block the PDB. So
// the webhook Service has no selector, and its one EndpointSlice (made by
// the chart, empty) names the leader alone: the leader writes its own pod
// IP there while it serves, rewrites it every webhookEndpointResync (a
// `helm upgrade` resets the slice to the chart's), and empties it when it
// stops. The operator may only get and update that one slice (RBAC
// resourceNames), not create slices, which could take over other
// Services' traffic.

// webhookEndpointResync is how often the leader checks the slice.
const webhookEndpointResync = 10 * time.Second

// webhookEndpoint publishes the leader's webhook address in an EndpointSlice.
type webhookEndpoint struct {
	c    client.Client // uncached: a cache would list every slice in the cluster
	key  client.ObjectKey
	addr netip.Addr
	port int32
	log  logr.Logger
}

// newWebhookEndpoint checks the flags: the slice's namespace and the pod's
// IP are needed, and the port is the webhook's listen port.
func newWebhookEndpoint(c client.Client, namespace, name, advertise, listen string, log logr.Logger) (*webhookEndpoint, error) {
	if namespace == "" {
		return nil, errors.New("--webhook.endpointslice needs --webhook.endpointslice-namespace (the pod's namespace: the downward API's metadata.namespace)")
	}
	addr, err := netip.ParseAddr(advertise)
	if err != nil {
		return nil, fmt.Errorf("--webhook.advertise-address %q: want the pod's IP (the downward API's status.podIP): %w", advertise, err)
	}
	_, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("--webhook.address %q: %w", listen, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return nil, fmt.Errorf("--webhook.address %q: give a port, e.g. :8443", listen)
	}
	return &webhookEndpoint{c: c, key: client.ObjectKey{Namespace: namespace, Name: name}, addr: addr, port: int32(port), log: log}, nil
}

// run publishes the address until ctx ends, then withdraws it.
func (e *webhookEndpoint) run(ctx context.Context) {
	t := time.NewTicker(webhookEndpointResync)
	defer t.Stop()
	for {
		if err := e.set(ctx, true); err != nil && ctx.Err() == nil {
			e.log.Error(err, "cannot publish the webhook endpoint; senders reach no replica until it is", "endpointslice", e.key)
		}
		select {
		case <-ctx.Done():
			wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := e.set(wctx, false); err != nil {
				e.log.Error(err, "cannot withdraw the webhook endpoint; the next leader replaces it", "endpointslice", e.key)
			}
			return
		case <-t.C:
		}
	}
}

// set writes the leader's endpoint (publish) or removes it (withdraw,
// only when the slice still names this pod: a new leader may have
// written its own already).
func (e *webhookEndpoint) set(ctx context.Context, publish bool) error {
	var s discoveryv1.EndpointSlice
	if err := e.c.Get(ctx, e.key, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("EndpointSlice %s does not exist (the chart makes it; the operator may not create slices): %w", e.key, err)
		}
		return fmt.Errorf("get EndpointSlice %s: %w", e.key, err)
	}
	name, proto := "https", corev1.ProtocolTCP
	want := s.DeepCopy()
	if publish {
		ready := true
		want.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{e.addr.String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}
		want.Ports = []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &e.port}}
	} else {
		if len(s.Endpoints) != 1 || len(s.Endpoints[0].Addresses) != 1 || s.Endpoints[0].Addresses[0] != e.addr.String() {
			return nil
		}
		want.Endpoints = []discoveryv1.Endpoint{}
	}
	if equality.Semantic.DeepEqual(want.Endpoints, s.Endpoints) && equality.Semantic.DeepEqual(want.Ports, s.Ports) {
		return nil
	}
	if err := e.c.Update(ctx, want); err != nil {
		return fmt.Errorf("update EndpointSlice %s: %w", e.key, err)
	}
	e.log.Info("webhook endpoint", "endpointslice", e.key, "address", e.addr, "published", publish)
	return nil
}
