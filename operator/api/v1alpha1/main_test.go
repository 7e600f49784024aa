package v1alpha1

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopShared()
	os.Exit(code)
}

// crdDir holds the CRDs `make manifests` generates.
var crdDir = filepath.Join("..", "..", "config", "crd", "bases")

// apiServer returns the test binary's kube-apiserver with the CRDs
// installed, and an uncached client that knows the API's types.
func apiServer(t *testing.T) (*rest.Config, client.Client) {
	t.Helper()
	cfg, _ := testenv.SharedAPIServer(t)
	testenv.InstallCRDs(t, cfg, crdDir)
	s, err := testScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, c
}

func testScheme() (*runtime.Scheme, error) {
	s, err := testenv.Scheme()
	if err != nil {
		return nil, err
	}
	return s, AddToScheme(s)
}

var namespaces atomic.Int64

// namespace makes a namespace of the test's own on the shared server.
func namespace(t *testing.T, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("api-%d", namespaces.Add(1))}}
	if err := c.Create(testContext(t), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return ns.Name
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
