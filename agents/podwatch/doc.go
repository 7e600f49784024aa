// Package podwatch names the pods of this node for the cgroup sampler
// (agents/collect's PodNamer): pod UID → "namespace/name", and a
// container's runtime id → its name in the pod's spec.
//
// A Watcher lists the pods whose spec.nodeName is this node (a field
// selector, so the API server sends nothing of other nodes), then watches
// them from the list's resourceVersion, with plain HTTP and encoding/json:
// client-go's typed clientsets and their scheme would add hundreds of
// packages to the agent for one field selector (agents/ARCHITECTURE.md).
// A watch the API server ends is resumed from the last resourceVersion; a
// 410 Gone, or a stream that cannot be decoded or is too large, starts
// again from a list, which replaces the cache whole. While the API server
// cannot be reached the Watcher retries with doubling, jittered waits and
// keeps answering with the names it last knew.
//
// What it keeps is bounded: at most Config.MaxPods pods and
// MaxContainersPerPod containers each, only their names and ids; one
// watch event may take at most MaxEventBytes and one list page
// MaxListBytes of the response before the read stops with ErrTooLarge.
// Whatever is not kept is counted (Stats, Register).
//
// It needs get, list and watch on pods, cluster-wide (RBAC cannot limit a
// list to a node; the field selector does): the chart's agent ClusterRole.
//
// Lifecycle: New builds a Watcher and requests nothing. The caller runs
// Run in a goroutine it owns and stops it by cancelling Run's context;
// there is nothing to close. PodName and ContainerName are safe for
// concurrent use at any time, before Run (they know nothing yet) and
// after it returned (they keep the last names). The bearer token file is
// read again every minute and after a 401, as the kubelet rotates it; the
// CA file is read once, by New.
package podwatch
