package testenv

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// apiServer is a kube-apiserver with its etcd, started through envtest.
type apiServer struct {
	env    *envtest.Environment
	config *rest.Config
	client client.Client
	pgids  []int // registered with the reaper
}

const (
	apiServerStartTimeout = 90 * time.Second
	apiServerStopTimeout  = 30 * time.Second
)

// startMu serializes envtest starts in this process, so that the children
// that appear during one start belong to it.
var startMu sync.Mutex

// Scheme returns a scheme with the built-in Kubernetes types and
// apiextensions/v1, as used by the clients this package returns. Add a
// project's own API types to it with their AddToScheme.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("testenv: scheme: %w", err)
	}
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("testenv: scheme: %w", err)
	}
	return s, nil
}

// StartAPIServer starts etcd and kube-apiserver from KUBEBUILDER_ASSETS,
// installs the CRDs found in crdDirs (a missing folder is an error) and
// returns an admin config and an uncached client. Both are stopped in
// t.Cleanup. Objects of types outside Scheme() work as unstructured.
func StartAPIServer(t testing.TB, crdDirs ...string) (*rest.Config, client.Client) {
	t.Helper()
	a, err := startAPIServer(crdDirs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Stop(); err != nil {
			t.Error(err)
		}
	})
	return a.config, a.client
}

// SharedAPIServer returns the test binary's API server, starting it without
// CRDs on first use; StopShared stops it. It fails t if the server cannot
// start, and every later call fails the same way without trying again.
// Tests share its objects: give each test its own namespace, and install
// CRDs with InstallCRDs.
func SharedAPIServer(t testing.TB) (*rest.Config, client.Client) {
	t.Helper()
	if sharedStopped() {
		t.Fatal("testenv: SharedAPIServer called after StopShared")
	}
	shared.apiOnce.Do(func() {
		shared.api, shared.apiErr = startAPIServer(nil)
	})
	if shared.apiErr != nil {
		t.Fatal(shared.apiErr)
	}
	if shared.api == nil {
		t.Fatal("testenv: SharedAPIServer called after StopShared")
	}
	return shared.api.config, shared.api.client
}

// InstallCRDs installs the CRDs found in crdDirs into the API server of cfg
// and waits until they are served. CRDs are cluster-wide: on a shared server
// every test sees them, and installing the same CRD twice is an update.
func InstallCRDs(t testing.TB, cfg *rest.Config, crdDirs ...string) {
	t.Helper()
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	_, err = envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
		Scheme:             s,
		Paths:              crdDirs,
		ErrorIfPathMissing: true,
	})
	if err != nil {
		t.Fatalf("testenv: install CRDs from %v: %v", crdDirs, err)
	}
}

func startAPIServer(crdDirs []string) (*apiServer, error) {
	paths, err := Paths()
	if err != nil {
		return nil, err
	}
	assets, err := paths.EnvtestAssetsDir()
	if err != nil {
		return nil, err
	}
	s, err := Scheme()
	if err != nil {
		return nil, err
	}
	useExisting := false
	env := &envtest.Environment{
		// Never the developer's cluster, whatever USE_EXISTING_CLUSTER says.
		UseExistingCluster:       &useExisting,
		BinaryAssetsDirectory:    assets,
		Scheme:                   s,
		CRDDirectoryPaths:        crdDirs,
		ErrorIfCRDPathMissing:    len(crdDirs) > 0,
		ControlPlaneStartTimeout: apiServerStartTimeout,
		ControlPlaneStopTimeout:  apiServerStopTimeout,
	}

	startMu.Lock()
	before, listErr := childrenNamed("etcd", "kube-apiserver")
	cfg, err := env.Start()
	after, listErr2 := childrenNamed("etcd", "kube-apiserver")
	startMu.Unlock()

	a := &apiServer{env: env, config: cfg}
	if listErr == nil && listErr2 == nil {
		for _, pid := range after {
			if !slices.Contains(before, pid) {
				a.pgids = append(a.pgids, pid) // envtest gives each child its own group
			}
		}
	}
	// Register even when Start failed: it may have left a child running.
	guardErr := theReaper.guard(a.pgids)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("testenv: start kube-apiserver and etcd from %s: %w", assets, err), a.Stop())
	}
	if guardErr != nil {
		// Only crash cleanup is lost; the server itself is fine.
		warn(guardErr)
	}
	if a.client, err = client.New(cfg, client.Options{Scheme: s}); err != nil {
		return nil, errors.Join(fmt.Errorf("testenv: kubernetes client: %w", err), a.Stop())
	}
	return a, nil
}

// Stop stops kube-apiserver and etcd and removes their data.
func (a *apiServer) Stop() error {
	err := a.env.Stop()
	if err != nil {
		return fmt.Errorf("testenv: stop kube-apiserver and etcd: %w", err)
	}
	if relErr := theReaper.release(a.pgids); relErr != nil {
		warn(relErr)
	}
	return nil
}
