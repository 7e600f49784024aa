// Package workload names the workload a cgroup's counters belong to, the
// same way in every room: the agent labels each cgroup with its pod
// (namespace/pod[/container]) or its systemd unit; a fleet pattern speaks
// of the Deployment or DaemonSet those pods share, whose pods have a
// different name on every host.
package workload

import "strings"

// MetricPrefix starts the names of the per-cgroup counters, whose device
// is a workload cgroup.
const MetricPrefix = "spikehunt.cgroup."

// podSuffixAlphabet is what Kubernetes draws a generated name's suffix
// from (consonants and digits that do not spell words):
// k8s.io/apimachinery/pkg/util/rand's alphanums.
const podSuffixAlphabet = "bcdfghjklmnpqrstvwxz2456789"

// Family is the fleet-wide name of a per-cgroup counter's device: a pod of
// a Deployment, ReplicaSet or DaemonSet without its own five-character
// suffix ("shop/checkout-7d9c8b6f5-x2k4q/app" → "shop/checkout-7d9c8b6f5/app"),
// anything else unchanged (a systemd unit, a StatefulSet's "db-0", a NIC).
func Family(metric, device string) string {
	if !strings.HasPrefix(metric, MetricPrefix) {
		return device
	}
	ns, rest, ok := strings.Cut(device, "/")
	if !ok || ns == "" || IsSystemdUnit(device) {
		return device
	}
	pod, container, hasContainer := strings.Cut(rest, "/")
	i := len(pod) - 6
	if i < 1 || pod[i] != '-' || !generatedSuffix(pod[i+1:]) {
		return device
	}
	out := ns + "/" + pod[:i]
	if hasContainer {
		out += "/" + container
	}
	return out
}

func generatedSuffix(s string) bool {
	for _, r := range s {
		if !strings.ContainsRune(podSuffixAlphabet, r) {
			return false
		}
	}
	return true
}

// IsSystemdUnit says whether a cgroup path ends in a systemd unit (a
// service, slice, scope, socket or mount).
func IsSystemdUnit(path string) bool {
	last := path[strings.LastIndexByte(path, '/')+1:]
	for _, suffix := range []string{".service", ".slice", ".scope", ".socket", ".mount"} {
		if strings.HasSuffix(last, suffix) {
			return true
		}
	}
	return false
}

// FamilySQL is Family as a ClickHouse expression over the columns metric
// and device, for queries that match a pattern's families against each
// host's rows.
const FamilySQL = `if(startsWith(metric, '` + MetricPrefix + `')
    AND NOT match(device, '\\.(service|slice|scope|socket|mount)$'),
    replaceRegexpOne(device, '^([^/]+/[^/]+)-[` + podSuffixAlphabet + `]{5}(/|$)', '\\1\\2'), device)`
