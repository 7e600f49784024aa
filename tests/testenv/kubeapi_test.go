package testenv_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestSharedAPIServerStoresNamespacesAndConfigMaps(t *testing.T) {
	_, c := testenv.SharedAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "testenv-core"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "thresholds", Namespace: ns.Name},
		Data:       map[string]string{"softirq_net_rx_ratio": "0.4"},
	}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatalf("create configmap: %v", err)
	}

	var namespaces corev1.NamespaceList
	if err := c.List(ctx, &namespaces); err != nil {
		t.Fatalf("list namespaces: %v", err)
	}
	found := false
	for _, n := range namespaces.Items {
		found = found || n.Name == ns.Name
	}
	if !found {
		t.Errorf("namespace %s not listed among %d namespaces", ns.Name, len(namespaces.Items))
	}

	var cms corev1.ConfigMapList
	if err := c.List(ctx, &cms, client.InNamespace(ns.Name)); err != nil {
		t.Fatalf("list configmaps: %v", err)
	}
	got := map[string]map[string]string{}
	for _, item := range cms.Items {
		// The API server adds kube-root-ca.crt to every namespace, but only once
		// its controller manager runs; envtest has none.
		got[item.Name] = item.Data
	}
	want := map[string]map[string]string{"thresholds": {"softirq_net_rx_ratio": "0.4"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("configmaps in %s (-want +got):\n%s", ns.Name, diff)
	}
}

// spikeWindowCRD is a minimal CRD, enough to prove that StartAPIServer
// installs what it finds in its crdDirs.
const spikeWindowCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: spikewindows.testenv.spikehunt.dev
spec:
  group: testenv.spikehunt.dev
  scope: Namespaced
  names:
    kind: SpikeWindow
    listKind: SpikeWindowList
    plural: spikewindows
    singular: spikewindow
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              durationSeconds:
                type: integer
`

func TestStartAPIServerInstallsCRDsFromDirs(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "spikewindows.yaml"), []byte(spikeWindowCRD), 0o644); err != nil {
		t.Fatal(err)
	}
	_, c := testenv.StartAPIServer(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	gvk := schema.GroupVersionKind{Group: "testenv.spikehunt.dev", Version: "v1", Kind: "SpikeWindow"}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	obj.SetNamespace("default")
	obj.SetName("eth0-rx")
	if err := unstructured.SetNestedField(obj.Object, int64(30), "spec", "durationSeconds"); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, obj); err != nil {
		t.Fatalf("create SpikeWindow: %v", err)
	}

	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind("SpikeWindowList"))
	if err := c.List(ctx, list, client.InNamespace("default")); err != nil {
		t.Fatalf("list SpikeWindows: %v", err)
	}
	type item struct {
		Name     string
		Duration int64
	}
	var got []item
	for _, o := range list.Items {
		d, _, _ := unstructured.NestedInt64(o.Object, "spec", "durationSeconds")
		got = append(got, item{o.GetName(), d})
	}
	if diff := cmp.Diff([]item{{"eth0-rx", 30}}, got); diff != "" {
		t.Errorf("SpikeWindows (-want +got):\n%s", diff)
	}
}

func TestStartAPIServerFailsOnMissingCRDDir(t *testing.T) {
	// StartAPIServer would t.Fatal; a subtest shows the failure without
	// failing this test, so run it in its own test binary instead.
	if os.Getenv("TESTENV_CHILD") == "missing-crd-dir" {
		testenv.StartAPIServer(t, filepath.Join(t.TempDir(), "no-such-dir"))
		return
	}
	out, err := runChild(t, "TestStartAPIServerFailsOnMissingCRDDir", "missing-crd-dir")
	if err == nil {
		t.Fatalf("child passed; want it to fail on the missing CRD folder. Output:\n%s", out)
	}
	if !containsAll(out, "no-such-dir", "--- FAIL") {
		t.Errorf("child output does not name the missing folder:\n%s", out)
	}
}

func TestInstallCRDsOnTheSharedAPIServer(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "spikewindows.yaml"), []byte(spikeWindowCRD), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, c := testenv.SharedAPIServer(t)
	testenv.InstallCRDs(t, cfg, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: "testenv.spikehunt.dev", Version: "v1", Kind: "SpikeWindowList"})
	if err := c.List(ctx, list); err != nil {
		t.Fatalf("list SpikeWindows after InstallCRDs: %v", err)
	}
}
