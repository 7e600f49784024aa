package testenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Manifests decodes every object of the YAML files in dir (a kustomize
// folder such as operator/config/rbac; its kustomization.yaml is left
// out), strictly: an unknown field fails the test.
func Manifests(t testing.TB, s *runtime.Scheme, dir string) []client.Object {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	decoder := serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
	var objs []client.Object
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := docs.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(bytes.TrimSpace(bytes.TrimPrefix(bytes.TrimSpace(doc), []byte("---")))) == 0 {
				continue
			}
			obj, _, err := decoder.Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			objs = append(objs, obj.(client.Object))
		}
	}
	return objs
}

// CreateAll creates objs, leaving those that exist as they are.
func CreateAll(ctx context.Context, c client.Client, objs []client.Object) error {
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
		}
	}
	return nil
}

// AsServiceAccount returns cfg acting as the ServiceAccount name in
// namespace, with the groups a real token of it carries, so that a test
// proves what that identity's RBAC allows.
func AsServiceAccount(cfg *rest.Config, namespace, name string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + namespace + ":" + name,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
	return c
}

// Access is one thing an identity tries against the API server, and
// whether RBAC should let it.
type Access struct {
	Name    string
	Act     func() error
	Allowed bool
}

// CheckAccess runs each attempt as a subtest: an allowed one must succeed,
// a refused one must fail with Forbidden (not with any other error, which
// would hide a missing rule behind, say, a missing object).
func CheckAccess(t *testing.T, attempts []Access) {
	t.Helper()
	for _, a := range attempts {
		t.Run(a.Name, func(t *testing.T) {
			err := a.Act()
			switch {
			case a.Allowed && err != nil:
				t.Errorf("refused: %v", err)
			case !a.Allowed && err == nil:
				t.Error("allowed")
			case !a.Allowed && !apierrors.IsForbidden(err):
				t.Errorf("error %v, want Forbidden", err)
			}
		})
	}
}

// Attempt is an Access: what name tries (act), and whether it is allowed.
func Attempt(name string, act func() error, allowed bool) Access {
	return Access{Name: name, Act: act, Allowed: allowed}
}
