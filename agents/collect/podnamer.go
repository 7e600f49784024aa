package collect

// PodNamer names the Kubernetes workloads found in the cgroup tree. The
// cgroup sampler knows a pod only by the UID in its cgroup's path and a
// container by its runtime id; a PodNamer turns them into the names
// people use. It is called from the slow-cadence rescan, which may run
// while a fast pass samples, so implementations must be safe for
// concurrent use and should answer from a cache: a lookup that blocks
// holds up the rescan.
type PodNamer interface {
	// PodName returns "namespace/name" for a pod UID, and false when the
	// pod is unknown (not yet seen, or not on this node).
	PodName(uid string) (string, bool)
	// ContainerName returns the container's name in its pod spec for a
	// runtime container id (the 64 hex digits of containerd, CRI-O and
	// Docker), and false when unknown.
	ContainerName(id string) (string, bool)
}

// agents/podwatch's Watcher is the agent's PodNamer in a cluster.

// uidPodNamer is the PodNamer of a node without a pod watch: it knows no
// name, so pods are shown as "pod <uid>" and containers by the first 12
// digits of their id, as crictl and docker print them.
type uidPodNamer struct{}

func (uidPodNamer) PodName(string) (string, bool)       { return "", false }
func (uidPodNamer) ContainerName(string) (string, bool) { return "", false }

// podName is the cgroup attribute of a pod.
func podName(n PodNamer, uid string) string {
	if name, ok := n.PodName(uid); ok && name != "" {
		return name
	}
	return "pod " + uid
}

// containerName is the cgroup attribute of a container of a pod.
func containerName(n PodNamer, uid, id string) string {
	pod := podName(n, uid)
	if name, ok := n.ContainerName(id); ok && name != "" {
		return pod + "/" + name
	}
	if len(id) > 12 {
		id = id[:12]
	}
	return pod + "/" + id
}
