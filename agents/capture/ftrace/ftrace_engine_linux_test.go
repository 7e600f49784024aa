package ftrace

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/agents/capture/internal/capturetest"
	"github.com/spikehunt/spikehunt/internal/capture/control"
)

// The perf test's scene with ftrace: the local trigger fires on the slow
// request, and the artifact's first dump (the snapshot, or on a kernel
// without snapshots the frozen first instance) shows the handler's
// thread off the CPU for about the request's second.
func TestFtraceFlightRecorderCatchesTheSlowRequestsThreadLeavingTheCPU(t *testing.T) {
	b := ftraceForTest(t)
	e, err := capture.NewEngine(capture.EngineConfig{Dir: t.TempDir(), Backends: []capture.Backend{b}, Resource: capture.HostIdentity{Host: "test-host"}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := capturetest.StartSlowServer(t, e.Observe)
	spec := capture.Spec{ID: "ftrace-slow", Backend: capture.Ftrace, Pre: 2 * time.Second, Post: 500 * time.Millisecond,
		Trigger: capture.Trigger{Service: "web", Latency: 500 * time.Millisecond}}
	if _, err := e.Arm(ctx, spec); err != nil {
		t.Fatal(err)
	}
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	go srv.Load(lctx, 200)
	time.Sleep(1500 * time.Millisecond) // the ring covers the whole pre-window
	srv.Get(t, "/slow")
	st, err := e.Wait(ctx, spec.ID)
	lcancel()
	if err != nil || st.State != control.Collected {
		t.Fatalf("%v %s %s", err, st.State, st.Error)
	}
	md := st.Metadata
	slow := srv.Slow()[0]
	slowEnd := slow.Start.Add(slow.Duration)
	t.Logf("fire to dump %v, files %v, overruns %d, notes %q", st.FireToDump, md.Files, md.Overruns, md.Notes)
	if !md.FiredAt.Equal(slowEnd) || md.FiredAt.Sub(md.WindowStart) != spec.Pre || md.WindowEnd.Sub(md.FiredAt) != spec.Post {
		t.Errorf("window %v … %v fired %v, want [fire − pre, fire + post] around %v", md.WindowStart, md.WindowEnd, md.FiredAt, slowEnd)
	}
	if md.Clock.Name != "CLOCK_MONOTONIC" || md.Clock.Offset == 0 {
		t.Errorf("clock %+v", md.Clock)
	}
	if len(md.Files) == 0 || !strings.HasPrefix(md.Files[0].Name, "ftrace-pre") {
		t.Fatalf("files %v: want the pre-window dump first", md.Files)
	}
	evs := ftraceEvents(t, filepath.Join(st.Location, md.Files[0].Name))
	toMono := func(w time.Time) time.Duration { return time.Duration(w.UnixNano()) - md.Clock.Offset }
	out, in, _ := longestOffCPU(evs, int(slow.ThreadID), toMono(slow.Start)-time.Millisecond, toMono(slowEnd)+time.Millisecond)
	if out == nil {
		t.Fatalf("no switch out and back of thread %d inside the request in %d events", slow.ThreadID, len(evs))
	}
	if off := in.TS - out.TS; off < 900*time.Millisecond || off > 1100*time.Millisecond {
		t.Errorf("thread %d off CPU %v inside the request, want about 1 s", slow.ThreadID, off)
	}
	if !strings.Contains(out.Body, "prev_state=S") {
		t.Errorf("the switch out is not a sleep: %s", out.Body)
	}
	b2, err := os.ReadFile(filepath.Join(st.Location, md.Requests))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b2), `"endpoint":"/slow"`) {
		t.Errorf("the slow request is not beside the trace")
	}
}
