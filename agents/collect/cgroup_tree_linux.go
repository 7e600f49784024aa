package collect

import (
	"errors"
	"io"
	"os"
	"path"
	"slices"
	"strings"
)

// The cgroup sampler's workloads, found by walking the first levels of a
// cgroup hierarchy (v1's cpu controller or v2's unified tree, whose
// layouts are the same):
//
//   - Kubernetes, under kubepods (cgroupfs driver) or kubepods.slice
//     (systemd driver): each pod, Guaranteed ones directly below, the
//     other QoS classes below burstable/besteffort
//     (kubepods-burstable.slice, kubepods-besteffort.slice), and each
//     container of a pod, named by the runtime (an id under cgroupfs;
//     cri-containerd-<id>.scope, crio-<id>.scope or docker-<id>.scope
//     under systemd).
//   - Elsewhere, systemd's top-level slices and scopes (system.slice,
//     user.slice, init.scope) and the services, scopes and slices directly
//     in a slice (system.slice/backup.service, user.slice/user-1000.slice).
//
// A container is nested in its pod and a service in its slice: their
// times are part of the parent's too, which the "other" series respects.

// cgroupWorkload is one cgroup the sampler reads.
type cgroupWorkload struct {
	rel         string // below the hierarchy's root, "/"-separated
	podUID      string // pods and their containers
	containerID string // containers
	nested      bool   // inside another workload
}

// name is the workload's cgroup attribute: "namespace/pod" or "pod <uid>"
// and its container on Kubernetes, the unit's path elsewhere.
func (w cgroupWorkload) name(n PodNamer) string {
	switch {
	case w.containerID != "":
		return containerName(n, w.podUID, w.containerID)
	case w.podUID != "":
		return podName(n, w.podUID)
	}
	return w.rel
}

// cgroupWalk collects workloads up to limit; the directories it had to
// leave out are counted.
type cgroupWalk struct {
	root       string
	limit      int
	found      []cgroupWorkload
	notScanned int
}

func (w *cgroupWalk) add(c cgroupWorkload) bool {
	if len(w.found) >= w.limit {
		w.notScanned++
		return false
	}
	w.found = append(w.found, c)
	return true
}

// walkCgroups finds the workloads below root, at most limit of them,
// sorted by path. notScanned is how many directories that would have been
// workloads it left out; it is a lower bound, since it does not descend
// into them.
func walkCgroups(root string, limit int) (found []cgroupWorkload, notScanned int, err error) {
	w := &cgroupWalk{root: root, limit: limit}
	err = eachSubdir(root, func(name string) {
		switch {
		case name == "kubepods" || name == "kubepods.slice":
			w.kubepods(name)
		case strings.HasSuffix(name, ".scope"):
			w.add(cgroupWorkload{rel: name})
		case strings.HasSuffix(name, ".slice"):
			if !w.add(cgroupWorkload{rel: name}) {
				return
			}
			_ = eachSubdir(path.Join(root, name), func(child string) {
				if isSystemdUnit(child) {
					w.add(cgroupWorkload{rel: name + "/" + child, nested: true})
				}
			})
		}
	})
	if err != nil {
		return nil, 0, err
	}
	slices.SortFunc(w.found, func(a, b cgroupWorkload) int { return strings.Compare(a.rel, b.rel) })
	return w.found, w.notScanned, nil
}

// kubepods walks the kubelet's hierarchy. A directory that vanishes
// during the walk (a pod deleted) is passed over.
func (w *cgroupWalk) kubepods(top string) {
	_ = eachSubdir(path.Join(w.root, top), func(name string) {
		if uid, ok := podUIDFromDir(name); ok {
			w.pod(top+"/"+name, uid)
			return
		}
		if isQoSDir(name) {
			qos := top + "/" + name
			_ = eachSubdir(path.Join(w.root, qos), func(pod string) {
				if uid, ok := podUIDFromDir(pod); ok {
					w.pod(qos+"/"+pod, uid)
				}
			})
		}
	})
}

func (w *cgroupWalk) pod(rel, uid string) {
	if !w.add(cgroupWorkload{rel: rel, podUID: uid}) {
		return
	}
	_ = eachSubdir(path.Join(w.root, rel), func(name string) {
		if id, ok := containerIDFromDir(name); ok {
			w.add(cgroupWorkload{rel: rel + "/" + name, podUID: uid, containerID: id, nested: true})
		}
	})
}

// readDirBatch is how many entries a walk holds at a time: a directory of
// 100,000 cgroups costs no more memory than one of 256.
const readDirBatch = 256

// eachSubdir calls fn with the name of every directory in dir.
func eachSubdir(dir string, fn func(name string)) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		ents, err := f.ReadDir(readDirBatch)
		for _, e := range ents {
			if e.IsDir() {
				fn(e.Name())
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func isQoSDir(name string) bool {
	switch name {
	case "burstable", "besteffort", "kubepods-burstable.slice", "kubepods-besteffort.slice":
		return true
	}
	return false
}

func isSystemdUnit(name string) bool {
	return strings.HasSuffix(name, ".service") || strings.HasSuffix(name, ".scope") || strings.HasSuffix(name, ".slice")
}

// podUIDFromDir reads the pod UID in a pod cgroup's directory name:
// pod<uid> under the cgroupfs driver, kubepods[-<qos>]-pod<uid>.slice
// under systemd, which spells the UID's dashes as underscores (a dash in
// a slice name means nesting).
func podUIDFromDir(name string) (string, bool) {
	var uid string
	if rest, ok := strings.CutPrefix(name, "pod"); ok {
		uid = rest
	} else if rest, ok := strings.CutSuffix(name, ".slice"); ok && strings.HasPrefix(rest, "kubepods-") {
		i := strings.LastIndex(rest, "-pod")
		if i < 0 {
			return "", false
		}
		uid = strings.ReplaceAll(rest[i+len("-pod"):], "_", "-")
	} else {
		return "", false
	}
	if uid == "" || len(uid) > 64 {
		return "", false
	}
	for _, c := range uid {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c == '-') {
			return "", false
		}
	}
	return uid, true
}

// containerRuntimePrefixes are how systemd-driver runtimes name a
// container's scope: <prefix><id>.scope.
var containerRuntimePrefixes = []string{"cri-containerd-", "crio-", "docker-"}

// containerIDFromDir reads the container id in a container cgroup's
// directory name: the bare id under the cgroupfs driver, a runtime's
// scope under systemd. CRI-O's crio-conmon-<id>.scope holds its monitor
// process, not the container, and is not a workload.
func containerIDFromDir(name string) (string, bool) {
	id := name
	if rest, ok := strings.CutSuffix(name, ".scope"); ok {
		id = ""
		for _, p := range containerRuntimePrefixes {
			if r, ok := strings.CutPrefix(rest, p); ok {
				id = r
				break
			}
		}
	}
	if id == "" || len(id) > 128 {
		return "", false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", false
		}
	}
	return id, true
}
