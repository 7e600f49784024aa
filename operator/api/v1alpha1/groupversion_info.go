// Package v1alpha1 is the capture.spikehunt.io/v1alpha1 API: CapturePolicy,
// which says which nodes keep a flight recorder armed and when the fleet's
// alerts widen that, and Capture, one arming of one recorder on one node
// (docs/design.md §6–7).
//
// The operator writes CapturePolicy status and creates Captures; the node's
// agent watches the Captures whose spec.nodeName is its node (a field
// selector the CRD declares), arms, fires and uploads, and writes Capture
// status. The OpenAPI and CEL rules in these types are the API server's
// checks; the agent checks a Capture again before it arms (a script name
// must also be in its allow-listed folder, which only the node knows).
//
// This package imports nothing of agents/: agents/ may import it.
//
// +kubebuilder:object:generate=true
// +groupName=capture.spikehunt.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API's group and version.
	GroupVersion = schema.GroupVersion{Group: "capture.spikehunt.io", Version: "v1alpha1"}

	// SchemeBuilder registers the API's types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
