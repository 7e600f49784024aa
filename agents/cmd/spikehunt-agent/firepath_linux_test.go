package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/agents/capture/perf"
	"github.com/spikehunt/spikehunt/agents/intake"
	"github.com/spikehunt/spikehunt/internal/capture/control"
)

// stampBackend is a recorder on our own interface that notes when the
// engine calls Fire: the fire path without a tool's dump.
type stampBackend struct{ fired chan time.Time }

func (b *stampBackend) Name() string { return capture.Perf }
func (b *stampBackend) Check() error { return nil }
func (b *stampBackend) New(_ capture.Spec, dir string) (capture.Recorder, error) {
	return &stampRecorder{b: b, dir: dir}, nil
}

type stampRecorder struct {
	b   *stampBackend
	dir string
}

func (r *stampRecorder) Arm(context.Context) error { return nil }
func (r *stampRecorder) Fire(context.Context) error {
	r.b.fired <- time.Now()
	return os.WriteFile(filepath.Join(r.dir, "pre.txt"), []byte("pre\n"), 0o640)
}
func (r *stampRecorder) Collect(context.Context) (capture.Result, error) {
	return capture.Result{Files: []string{"pre.txt"}}, nil
}
func (r *stampRecorder) Disarm() error { return nil }

// BenchmarkDatagramToFire is the agent's own fire path: a trusted app
// (this process, root) writes one slow line to the unix socket, and the
// intake (recvmsg with the sender's credentials, the allow-list, the
// sampler) and the engine (the trigger, the sender's fire rate) call the
// recorder's Fire. It arms, fires and collects 40 captures, whatever
// b.N is, and prints the median and the worst.
//
//	agent.datagram_to_fire_us  median, µs
//	agent.datagram_to_fire_max_us
func BenchmarkDatagramToFire(b *testing.B) {
	dir, err := os.MkdirTemp("", "shf")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "agent.sock")
	in, err := intake.New(intake.Config{LineUnix: sock, SlowThreshold: 500 * time.Millisecond}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	back := &stampBackend{fired: make(chan time.Time, 1)}
	eng, err := capture.NewEngine(capture.EngineConfig{Dir: dir, Backends: []capture.Backend{back},
		FireEvery: time.Second, FireBurst: 64, MinFreeBytes: 1})
	if err != nil {
		b.Fatal(err)
	}
	in.Tap(eng.ObserveFrom)
	if err := in.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { in.Close(); eng.Close() })
	go func() {
		for range in.Out() {
		}
	}()
	c, err := net.Dial("unixgram", sock)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var took []float64
	for i := range 40 {
		id := "f" + strconv.Itoa(i)
		spec := capture.Spec{ID: id, Backend: capture.Perf, Pre: time.Millisecond, Post: time.Millisecond,
			Trigger: capture.Trigger{Service: "checkout", Latency: 500 * time.Millisecond}}
		if _, err := eng.Arm(ctx, spec); err != nil {
			b.Fatal(err)
		}
		sent := time.Now()
		if _, err := c.Write([]byte("checkout /pay 5000000 200\n")); err != nil {
			b.Fatal(err)
		}
		select {
		case at := <-back.fired:
			took = append(took, float64(at.Sub(sent).Microseconds()))
		case <-time.After(5 * time.Second):
			b.Fatalf("capture %s did not fire", id)
		}
		if st, err := eng.Wait(ctx, id); err != nil || st.State != control.Collected {
			b.Fatalf("%s: %v %s %s", id, err, st.State, st.Error)
		}
		eng.Forget(id)
	}
	sort.Float64s(took)
	b.ReportMetric(took[len(took)/2], "agent.datagram_to_fire_us:µs")
	b.ReportMetric(took[len(took)-1], "agent.datagram_to_fire_max_us:µs")
}

// BenchmarkDatagramToPerfDump is the whole fire path with the real perf
// flight recorder: a trusted datagram to the built agent, to the
// pre-window dump on disk (Status.FireToDump: from the request's receipt,
// which for the line protocol is its end). Three captures, whatever b.N
// is; the figure is the median.
//
//	agent.datagram_to_perf_dump_ms
func BenchmarkDatagramToPerfDump(b *testing.B) {
	if err := perf.New(perf.Config{}).Check(); err != nil || os.Geteuid() != 0 {
		b.Skipf("perf as root: %v", err)
	}
	p := startAgent(b, []string{"127.0.0.1:1"}, b.TempDir(), "--capture.backends", "perf", "--log-level", "warn", "--capture.fire-burst", "8")
	var took []float64
	for i := range 3 {
		id := "d" + strconv.Itoa(i)
		if out, err := captureCLI(b, p, "arm", "--id", id, "--backend", "perf", "--service", "checkout",
			"--latency", "500ms", "--pre", "1s", "--post", "200ms"); err != nil {
			b.Fatalf("arm: %v\n%s", err, out)
		}
		time.Sleep(1500 * time.Millisecond) // the ring fills its pre-window
		c, err := net.Dial("unixgram", p.sock)
		if err != nil {
			b.Fatal(err)
		}
		c.Write([]byte("checkout /pay 5000000 200\n"))
		c.Close()
		out, err := captureCLI(b, p, "wait", id, "--timeout", "30s", "--json")
		if err != nil {
			b.Fatalf("wait: %v\n%s", err, out)
		}
		var st control.Status
		if err := json.Unmarshal([]byte(out), &st); err != nil || st.State != control.Collected {
			b.Fatalf("%v %s: %s", err, st.State, out)
		}
		took = append(took, float64(st.FireToDump.Microseconds())/1000)
	}
	sort.Float64s(took)
	b.ReportMetric(took[len(took)/2], "agent.datagram_to_perf_dump_ms:ms")
	b.Logf("fire→dump %v ms", took)
}
