package podwatch

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrTooLarge is returned when a list page or a watch event is longer
// than the Config allows.
var ErrTooLarge = errors.New("podwatch: response too large")

// errGone is a watch's "410 Gone": the resourceVersion it resumed from is
// older than the API server keeps; only a new list recovers.
var errGone = errors.New("podwatch: resource version too old (410 Gone): list again")

// maxNameLen bounds a pod's namespace, name and UID, and a container's
// name and id: Kubernetes' names are at most 253 bytes (DNS subdomains),
// so a longer one is not from an API server.
const maxNameLen = 253

// pod is what the cache keeps of a Pod: its name and its containers'.
type pod struct {
	uid, namespace, name, node string
	containers                 []container
	droppedContainers          int // beyond MaxContainersPerPod
}

type container struct{ id, name string }

// wirePod is the part of a Pod's JSON the Watcher reads; encoding/json
// skips the rest without keeping it.
type wirePod struct {
	Metadata struct {
		Name            string `json:"name"`
		Namespace       string `json:"namespace"`
		UID             string `json:"uid"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Spec struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		ContainerStatuses          []wireContainer `json:"containerStatuses"`
		InitContainerStatuses      []wireContainer `json:"initContainerStatuses"`
		EphemeralContainerStatuses []wireContainer `json:"ephemeralContainerStatuses"`
	} `json:"status"`
}

type wireContainer struct {
	Name        string `json:"name"`
	ContainerID string `json:"containerID"`
}

// toPod checks a decoded Pod and keeps its names.
func (w *wirePod) toPod() (pod, error) {
	m := w.Metadata
	for _, f := range []struct{ what, v string }{{"name", m.Name}, {"namespace", m.Namespace}, {"uid", m.UID}} {
		if f.v == "" || len(f.v) > maxNameLen {
			return pod{}, fmt.Errorf("podwatch: a pod with a %s of %d bytes: want 1 to %d", f.what, len(f.v), maxNameLen)
		}
	}
	p := pod{uid: m.UID, namespace: m.Namespace, name: m.Name, node: w.Spec.NodeName}
	for _, list := range [][]wireContainer{w.Status.ContainerStatuses, w.Status.InitContainerStatuses, w.Status.EphemeralContainerStatuses} {
		for _, c := range list {
			id := runtimeID(c.ContainerID)
			if id == "" || c.Name == "" || len(id) > maxNameLen || len(c.Name) > maxNameLen || strings.ContainsRune(id, '/') {
				continue // not started yet (no id), or not an id a cgroup path can hold
			}
			if len(p.containers) >= MaxContainersPerPod {
				p.droppedContainers++
				continue
			}
			p.containers = append(p.containers, container{id: id, name: c.Name})
		}
	}
	return p, nil
}

// runtimeID is a status' containerID without its runtime's scheme
// ("containerd://", "cri-o://", "docker://"): the id the cgroup path holds.
func runtimeID(s string) string {
	if _, id, ok := strings.Cut(s, "://"); ok {
		return id
	}
	return s
}

// eventType is a watch event's type.
type eventType string

const (
	eventAdded    eventType = "ADDED"
	eventModified eventType = "MODIFIED"
	eventDeleted  eventType = "DELETED"
	eventBookmark eventType = "BOOKMARK"
	eventError    eventType = "ERROR"
)

// event is one decoded watch event: a pod, or for a bookmark only its
// resourceVersion.
type event struct {
	typ             eventType
	pod             pod
	resourceVersion string
}

// wireStatus is a metav1.Status, which an ERROR event carries.
type wireStatus struct {
	Kind    string `json:"kind"`
	Code    int    `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// decodeEvent decodes one watch event (a JSON object {"type", "object"}).
// An ERROR event is returned as an error: errGone for 410 (list again),
// otherwise the Status' message. It keeps no reference to data.
func decodeEvent(data []byte) (event, error) {
	var raw struct {
		Type   eventType       `json:"type"`
		Object json.RawMessage `json:"object"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return event{}, fmt.Errorf("podwatch: decode watch event: %w", err)
	}
	switch raw.Type {
	case eventAdded, eventModified, eventDeleted, eventBookmark:
	case eventError:
		var st wireStatus
		if err := json.Unmarshal(raw.Object, &st); err != nil {
			return event{}, fmt.Errorf("podwatch: decode watch error: %w", err)
		}
		if st.Code == 410 || st.Reason == "Expired" || st.Reason == "Gone" {
			return event{}, errGone
		}
		return event{}, fmt.Errorf("podwatch: the watch failed: %d %s: %.200s", st.Code, st.Reason, st.Message)
	default:
		return event{}, fmt.Errorf("podwatch: watch event of type %.40q: want ADDED, MODIFIED, DELETED, BOOKMARK or ERROR", raw.Type)
	}
	var w wirePod
	if err := json.Unmarshal(raw.Object, &w); err != nil {
		return event{}, fmt.Errorf("podwatch: decode %s pod: %w", raw.Type, err)
	}
	ev := event{typ: raw.Type, resourceVersion: w.Metadata.ResourceVersion}
	if len(ev.resourceVersion) > maxNameLen {
		return event{}, fmt.Errorf("podwatch: a resourceVersion of %d bytes", len(ev.resourceVersion))
	}
	if raw.Type == eventBookmark {
		return ev, nil
	}
	p, err := w.toPod()
	if err != nil {
		return event{}, err
	}
	ev.pod = p
	return ev, nil
}

// podList is one decoded page of a list.
type podList struct {
	resourceVersion, continueToken string
	pods                           []pod
}

// decodeList decodes one page of GET /api/v1/pods (a PodList). A pod that
// fails toPod is skipped and counted in invalid.
func decodeList(data []byte) (l podList, invalid int, err error) {
	var raw struct {
		Kind     string `json:"kind"`
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
			Continue        string `json:"continue"`
		} `json:"metadata"`
		Items []wirePod `json:"items"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return l, 0, fmt.Errorf("podwatch: decode pod list: %w", err)
	}
	if raw.Kind != "PodList" {
		return l, 0, fmt.Errorf("podwatch: the list is a %.40q, not a PodList", raw.Kind)
	}
	if raw.Metadata.ResourceVersion == "" {
		return l, 0, errors.New("podwatch: the pod list has no resourceVersion to watch from")
	}
	l.resourceVersion, l.continueToken = raw.Metadata.ResourceVersion, raw.Metadata.Continue
	l.pods = make([]pod, 0, len(raw.Items))
	for i := range raw.Items {
		p, err := raw.Items[i].toPod()
		if err != nil {
			invalid++
			continue
		}
		l.pods = append(l.pods, p)
	}
	return l, invalid, nil
}
