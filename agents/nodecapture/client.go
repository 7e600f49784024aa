package nodecapture

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	capturev1alpha1 "github.com/spikehunt/spikehunt/operator/api/v1alpha1"
)

// captureClient is the agent's whole use of the Kubernetes API: list and
// watch the Captures of one node, get one, and patch one's status — what
// the agent's ClusterRole (operator/config/rbac/agent_role.yaml) allows.
// It is client-go's REST client over the API's Go types, without the
// typed clientsets or controller-runtime's client and their schemes.
type captureClient struct {
	rc   *rest.RESTClient
	node string
}

const resource = "captures"

func newCaptureClient(cfg *rest.Config, node string) (*captureClient, error) {
	s := runtime.NewScheme()
	if err := capturev1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &capturev1alpha1.GroupVersion
	c.APIPath = "/apis"
	c.NegotiatedSerializer = serializer.NewCodecFactory(s).WithoutConversion()
	c.ContentType = runtime.ContentTypeJSON
	if c.UserAgent == "" {
		c.UserAgent = "spikehunt-agent/" + node
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &captureClient{rc: rc, node: node}, nil
}

// listWatch lists and watches, in every namespace, only the Captures whose
// spec.nodeName is the node: the API server filters them (the CRD declares
// the field selectable), so the agent never sees another node's.
func (cl *captureClient) listWatch() cache.ListerWatcher {
	sel := fields.OneTermEqualSelector("spec.nodeName", cl.node).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			out := &capturev1alpha1.CaptureList{}
			err := cl.rc.Get().Resource(resource).VersionedParams(&o, metav1.ParameterCodec).Do(ctx).Into(out)
			return out, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector, o.Watch = sel, true
			return cl.rc.Get().Resource(resource).VersionedParams(&o, metav1.ParameterCodec).Watch(ctx)
		},
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, cl.rc)
}

func (cl *captureClient) get(ctx context.Context, key cache.ObjectName) (*capturev1alpha1.Capture, error) {
	out := &capturev1alpha1.Capture{}
	err := cl.rc.Get().Namespace(key.Namespace).Resource(resource).Name(key.Name).Do(ctx).Into(out)
	return out, err
}

// patchStatus writes next as c's status with a JSON merge patch on the
// status subresource, conditional on c's resourceVersion: a Capture that
// changed since it was read is a Conflict, and the caller decides again
// from the fresh one. A merge patch, unlike an update, keeps status fields
// this agent's version of the API does not know.
func (cl *captureClient) patchStatus(ctx context.Context, c *capturev1alpha1.Capture, next capturev1alpha1.CaptureStatus) (*capturev1alpha1.Capture, error) {
	body, err := statusPatch(c.ResourceVersion, c.Status, next)
	if err != nil {
		return nil, err
	}
	out := &capturev1alpha1.Capture{}
	err = cl.rc.Patch(types.MergePatchType).Namespace(c.Namespace).Resource(resource).Name(c.Name).
		SubResource("status").Body(body).Do(ctx).Into(out)
	return out, err
}

// statusPatch is the merge patch from cur to next: next's fields, null for
// those next drops (a message cleared), and the resourceVersion
// precondition.
func statusPatch(resourceVersion string, cur, next capturev1alpha1.CaptureStatus) ([]byte, error) {
	var before, after map[string]any
	for _, x := range []struct {
		s   capturev1alpha1.CaptureStatus
		out *map[string]any
	}{{cur, &before}, {next, &after}} {
		b, err := json.Marshal(x.s)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, x.out); err != nil {
			return nil, err
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			after[k] = nil
		}
	}
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": resourceVersion},
		"status":   after,
	})
}
