// Package controller holds the operator's reconcilers, one per concern
// (CONTRIBUTING.md): each fetches its object (ignoring not found), gathers its
// inputs, calls a pure policy function from internal/policy and writes
// status only when it changed. cmd/main.go registers them with the
// manager.
//
//   - CapturePolicyReconciler: the bait and alert armings of each policy
//     (policy.Decide), within the fleet's budgets. See its documentation
//     for why decisions are serialized and read past the cache.
//   - CaptureReconciler: indexing of uploaded Captures (operator/internal/
//     index) and retention.
//   - AlertInbox: the fleet alerts' way in (intake.PolicySink(inbox.Offer)),
//     pending per policy until their armings exist or they age out.
//
// Decisions made here:
//
//   - A Capture's name is policy.ArmingName of the policy's name; its
//     spec.armingID, which names the artifact, is ArmingName of the policy's
//     UID, unique across namespaces and across a policy made again under an
//     old name.
//   - The budgets count a Capture as active from creation until it is
//     Uploaded, Failed or Expired, whatever its policy; its start is the
//     operator's clock at creation (annotation capture.spikehunt.io/
//     started-at).
//   - The host a capture is indexed under is its node's name: the agent
//     reports its node's name as the host of its telemetry.
//   - Retention: a Capture that ended (Uploaded, Indexed, Failed, Expired)
//     is stamped capture.spikehunt.io/ended-at and deleted once its policy's
//     retention.ttl has passed since then and its epoch is over (deleted
//     within the epoch, the policy would arm its node again under the same
//     name). The finalizer capture.spikehunt.io/artifact then deletes the
//     artifact (ArtifactDeleter, when main configures one) and the index
//     row, and lets the Capture go. Deleting the policy deletes its
//     Captures (owner references) the same way.
//
// # Lifecycle hazards
//
//   - AlertInbox.Offer blocks while the policy controller's event buffer is
//     full; the intake's Sink contract (retry on error) covers a ctx that
//     ends. The inbox holds alerts in memory: a restarted operator relies on
//     Kafka's uncommitted offsets and the webhook senders' retries, and
//     policy.Decide counts an alert's existing armings, so a redelivered
//     alert arms no more.
//   - The capture controller calls the store from its workers; the store is
//     the caller's to close, after the manager has stopped.
//   - With the embedded engine (a chdb:// store) in the process, a Go nil
//     pointer dereference that is recovered (fmt printing a nil
//     *metav1.Time inside a struct, say) kills the engine: libchdb installs
//     its own SIGSEGV handler. Do not format structs with nil pointers near
//     it; the tests avoid it.
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
