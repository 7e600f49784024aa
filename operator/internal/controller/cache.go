package controller

import (
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// CacheOptions are the manager's cache options the controllers are
// written for (cmd/main.go and the tests pass them to ctrl.NewManager).
//
// The cache keeps every Node's metadata and every Capture and policy;
// none of the controllers reads managed fields, which are most of a
// Node's metadata (a kubelet's status updates alone list every condition
// and address they own), so they are dropped as objects enter the cache:
// the operator's memory grows with the fleet's node count, and a
// 256 MiB operator otherwise runs out around 45,000 Nodes (docs/
// benchmarks.md, "Cost as the fleet grows"). Writes are unaffected: the
// controllers patch or update status, and the API server keeps an
// object's managed fields when a write carries none.
func CacheOptions() cache.Options {
	return cache.Options{DefaultTransform: cache.TransformStripManagedFields()}
}
