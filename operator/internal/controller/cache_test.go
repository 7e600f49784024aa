package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
)

// The operator caches the metadata of every Node of the fleet, and its
// memory grew with the node count past what it needs (make bench-scale):
// the managed fields, which no controller reads, are left out of the
// cache; the labels the policies select by are kept.
func TestTheOperatorsCacheHoldsNodesWithoutTheirManagedFields(t *testing.T) {
	e := newEnv(t)
	nodes := fleet("mf", 3, "gen4", "gen5")
	e.createNodes(t, nodes)
	ctx := context.Background()

	// On the API server the Nodes have managed fields (the admin client
	// wrote them), so the test can fail.
	server := nodeMetadataList()
	if err := e.admin.List(ctx, server, client.MatchingLabels{"fleet": "mf"}); err != nil {
		t.Fatal(err)
	}
	if len(server.Items) != len(nodes) || len(server.Items[0].ManagedFields) == 0 {
		t.Fatalf("the API server lists %d nodes, the first with %d managed fields: want %d, with some", len(server.Items), len(server.Items[0].ManagedFields), len(nodes))
	}

	op := e.startOperator(t, operatorOptions{})
	pol := e.basePolicy("mf", "mf")
	pol.Spec.Sampling.Percent = ptr[int32](100)
	e.create(t, pol)
	eventually(t, 30*time.Second, "the policy's captures in the operator's cache", func() error {
		var list v1alpha1.CaptureList
		if err := op.client.List(ctx, &list, client.InNamespace(e.ns)); err != nil {
			return err
		}
		if len(list.Items) != len(nodes) {
			return fmt.Errorf("%d captures cached, want %d", len(list.Items), len(nodes))
		}
		for _, c := range list.Items {
			if n := len(c.ManagedFields); n > 0 {
				t.Fatalf("capture %s is cached with %d managed fields", c.Name, n)
			}
		}
		return nil
	})

	cached := nodeMetadataList()
	if err := op.client.List(ctx, cached, client.MatchingLabels{"fleet": "mf"}); err != nil {
		t.Fatal(err)
	}
	if len(cached.Items) != len(nodes) {
		t.Fatalf("%d nodes cached, want %d", len(cached.Items), len(nodes))
	}
	for _, n := range cached.Items {
		if len(n.ManagedFields) > 0 {
			t.Errorf("node %s is cached with %d managed fields", n.Name, len(n.ManagedFields))
		}
		if n.Labels[v1alpha1.DefaultHWClassLabel] == "" || n.Labels["fleet"] != "mf" {
			t.Errorf("node %s is cached with labels %v: the policies select by them", n.Name, n.Labels)
		}
	}

	// The controllers' writes leave the server's managed fields alone.
	var c v1alpha1.Capture
	if err := e.admin.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: e.captures(t)[0].Name}, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.ManagedFields) == 0 {
		t.Errorf("capture %s has no managed fields on the API server: a write from the stripped cache wiped them", c.Name)
	}
}
