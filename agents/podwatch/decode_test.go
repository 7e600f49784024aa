package podwatch

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A watch stream in the shape kube-apiserver writes it (one JSON event a
// line; the fields the Watcher skips cut short), then the ERROR event it
// sends when the resourceVersion asked for is older than it keeps.
const recordedStream = `{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"checkout-7d9","namespace":"shop","uid":"0f6c3a5e-1b7c-4f0e-9a43-2d1c9e8b7a61","resourceVersion":"812","creationTimestamp":"2026-01-01T00:00:00Z"},"spec":{"containers":[{"name":"app","image":"shop:1"}],"nodeName":"node-a"},"status":{"phase":"Running","initContainerStatuses":[{"name":"migrate","containerID":"cri-o://aa11","image":"m","imageID":"","ready":false,"restartCount":0}],"containerStatuses":[{"name":"app","containerID":"containerd://8e2f","image":"shop:1","imageID":"","ready":true,"restartCount":0},{"name":"pending","image":"x","imageID":"","ready":false,"restartCount":0}]}}}
{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"900","creationTimestamp":null},"spec":{"containers":null},"status":{}}}
{"type":"DELETED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"checkout-7d9","namespace":"shop","uid":"0f6c3a5e-1b7c-4f0e-9a43-2d1c9e8b7a61","resourceVersion":"901"},"spec":{"nodeName":"node-a"},"status":{"containerStatuses":[{"name":"app","containerID":"docker://8e2f"}]}}}
{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 812 (902)","reason":"Expired","code":410}}
`

func TestReadEventsDecodesARecordedStreamAndStopsAtGone(t *testing.T) {
	var got []event
	err := readEvents(strings.NewReader(recordedStream), DefaultMaxEventBytes, func(ev event) error {
		got = append(got, ev)
		return nil
	})
	if !errors.Is(err, errGone) {
		t.Fatalf("err %v, want errGone (the ERROR event with 410)", err)
	}
	uid := "0f6c3a5e-1b7c-4f0e-9a43-2d1c9e8b7a61"
	want := []event{
		{typ: eventAdded, resourceVersion: "812", pod: pod{uid: uid, namespace: "shop", name: "checkout-7d9", node: "node-a",
			containers: []container{{id: "8e2f", name: "app"}, {id: "aa11", name: "migrate"}}}},
		{typ: eventBookmark, resourceVersion: "900"},
		{typ: eventDeleted, resourceVersion: "901", pod: pod{uid: uid, namespace: "shop", name: "checkout-7d9", node: "node-a",
			containers: []container{{id: "8e2f", name: "app"}}}},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(event{}, pod{}, container{})); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestRuntimeIDDropsTheRuntimesScheme(t *testing.T) {
	for in, want := range map[string]string{
		"containerd://8e2f": "8e2f", "cri-o://8e2f": "8e2f", "docker://8e2f": "8e2f", "8e2f": "8e2f", "": "",
	} {
		if got := runtimeID(in); got != want {
			t.Errorf("runtimeID(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestReadEventsRefusesHostileStreams(t *testing.T) {
	big := `{"type":"ADDED","object":{"metadata":{"name":"` + strings.Repeat("x", 64<<10) + `"}}}`
	for _, tc := range []struct {
		name, stream string
		want         error  // errors.Is, or nil
		msg          string // in the message
	}{
		{"an event over the bound is cut at the bound", big, ErrTooLarge, "over 16384 bytes (MaxEventBytes)"},
		{"garbage is a decode error", `{"type":"ADDED","object":{]`, nil, "read the watch stream"},
		{"an unknown event type is refused", `{"type":"HELLO","object":{}}`, nil, "watch event of type"},
		{"a pod without a uid is refused", `{"type":"ADDED","object":{"metadata":{"name":"a","namespace":"b"}}}`, nil, "a uid of 0 bytes"},
		{"a name longer than Kubernetes allows is refused", `{"type":"MODIFIED","object":{"metadata":{"name":"` + strings.Repeat("n", 254) + `","namespace":"b","uid":"u"}}}`, nil, "a name of 254 bytes"},
		{"an ERROR other than 410 says what failed", `{"type":"ERROR","object":{"code":500,"reason":"InternalError","message":"etcd down"}}`, nil, "500 InternalError: etcd down"},
		{"a stream cut inside an event", `{"type":"ADDED","obj`, io.ErrUnexpectedEOF, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			err := readEvents(strings.NewReader(tc.stream), 16<<10, func(event) error { n++; return nil })
			if err == nil {
				t.Fatalf("no error, %d events", n)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("err %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err %q, want it to say %q", err, tc.msg)
			}
		})
	}
}

// countingReader counts what was read from it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestAnOversizedEventIsNotReadToItsEnd(t *testing.T) {
	const max = 16 << 10
	huge := `{"type":"ADDED","object":{"metadata":{"name":"` + strings.Repeat("x", 8<<20) + `"}}}`
	cr := &countingReader{r: strings.NewReader(huge)}
	err := readEvents(cr, max, func(event) error { return nil })
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err %v, want ErrTooLarge", err)
	}
	if cr.n > max+1 {
		t.Errorf("read %d bytes of an 8 MiB event, want at most the bound %d (+1)", cr.n, max)
	}
}

func TestTheBoundIsPerEventNotPerStream(t *testing.T) {
	ev := `{"type":"ADDED","object":{"metadata":{"name":"p","namespace":"n","uid":"u","resourceVersion":"1"},"spec":{"nodeName":"a"}}}` + "\n"
	stream := strings.Repeat(ev, 1000) // 120 KB, far over the bound of one event
	n := 0
	if err := readEvents(strings.NewReader(stream), 4<<10, func(event) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 1000 {
		t.Errorf("%d events, want 1000", n)
	}
}

func TestReadCappedRefusesALongList(t *testing.T) {
	_, err := readCapped(bytes.NewReader(make([]byte, 5000)), 4096, "the pod list")
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "the pod list over 4096 bytes") {
		t.Errorf("err %v, want ErrTooLarge naming the bound", err)
	}
}

func TestToPodBoundsTheContainersKept(t *testing.T) {
	var w wirePod
	w.Metadata.Name, w.Metadata.Namespace, w.Metadata.UID = "p", "n", "u"
	for i := range MaxContainersPerPod + 5 {
		w.Status.ContainerStatuses = append(w.Status.ContainerStatuses, wireContainer{Name: "c", ContainerID: "containerd://" + strings.Repeat("a", i+1)})
	}
	p, err := w.toPod()
	if err != nil {
		t.Fatal(err)
	}
	if len(p.containers) != MaxContainersPerPod || p.droppedContainers != 5 {
		t.Errorf("%d containers kept and %d dropped, want %d and 5", len(p.containers), p.droppedContainers, MaxContainersPerPod)
	}
}

// FuzzReadEvents: any stream ends in events and nil or an error, never a
// panic, and what an event keeps is within Kubernetes' bounds.
func FuzzReadEvents(f *testing.F) {
	f.Add([]byte(recordedStream))
	f.Add([]byte(`{"type":"ERROR","object":{"code":410}}`))
	f.Add([]byte(`{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"7"}}}`))
	f.Add([]byte(`{"type":"ADDED","object":{]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = readEvents(bytes.NewReader(data), 4<<10, func(ev event) error {
			p := ev.pod
			if ev.typ != eventBookmark && (p.uid == "" || p.name == "" || p.namespace == "") {
				t.Fatalf("a %s event of a pod without uid, name or namespace: %+v", ev.typ, p)
			}
			if len(p.uid) > maxNameLen || len(p.name) > maxNameLen || len(p.namespace) > maxNameLen || len(p.containers) > MaxContainersPerPod {
				t.Fatalf("an event over the bounds: %+v", p)
			}
			for _, c := range p.containers {
				if c.id == "" || c.name == "" || strings.Contains(c.id, "://") {
					t.Fatalf("container %+v", c)
				}
			}
			return nil
		})
		_, _, _ = decodeList(data)
	})
}
