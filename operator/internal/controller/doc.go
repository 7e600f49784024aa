// Package controller holds the operator's reconcilers, one per concern
// (STYLE.md): each fetches its object (ignoring not found), gathers its
// inputs, calls a pure policy function from operator/policy and
// writes status only when it changed. cmd/main.go registers them with the
// manager.
//
// The markers below are the operator's permissions: `make manifests` turns
// them into config/rbac/role.yaml (ClusterRole spikehunt-operator). A
// reconciler that needs more adds its markers next to its code. Leader
// election's Lease permissions are a namespaced Role of their own
// (config/rbac/leader_election_role.yaml); the agent's are in
// config/rbac/agent_role.yaml.
//
// +kubebuilder:rbac:groups=capture.spikehunt.io,resources=capturepolicies,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=capture.spikehunt.io,resources=capturepolicies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=capture.spikehunt.io,resources=capturepolicies/finalizers,verbs=update
// +kubebuilder:rbac:groups=capture.spikehunt.io,resources=captures,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=capture.spikehunt.io,resources=captures/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=capture.spikehunt.io,resources=captures/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
package controller
