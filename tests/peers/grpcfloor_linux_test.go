package peers

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
)

// The gRPC floor: what the OTLP/gRPC load costs a process that only
// receives it. A server built as spikehunt-agent builds its own (grpc-go,
// the message handed over as bytes, 1 MiB flow-control windows, a worker
// per P, one P) answers every Export with an empty response and reads nothing
// of the message. Measured on the same load as the node agents, it is
// the part of their CPU that any grpc-go receiver pays: spikehunt-agent's
// figure above it is its own work (decoding, sampling, export).
//
// The server runs in its own process, the test binary itself started
// again with floorAddrEnv set (TestMain), so that its CPU is counted
// apart from the generator's.

const floorAddrEnv = "SPIKEHUNT_PEERS_GRPC_FLOOR_ADDR"

func init() {
	if addr := os.Getenv(floorAddrEnv); addr != "" {
		fmt.Fprintln(os.Stderr, "grpc floor:", serveGRPCFloor(addr))
		os.Exit(1)
	}
}

// serveGRPCFloor serves the floor on addr until the process is killed.
func serveGRPCFloor(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(
		grpc.MaxRecvMsgSize(16<<20),
		grpc.ForceServerCodecV2(floorCodec{}),
		grpc.InitialWindowSize(1<<20),
		grpc.InitialConnWindowSize(1<<20),
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
	)
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "opentelemetry.proto.collector.trace.v1.TraceService",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Export",
			Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var m floorMsg
				return &m, dec(&m)
			},
		}},
	}, struct{}{})
	return srv.Serve(ln)
}

// floorMsg is a message the floor neither reads nor writes: an empty
// ExportTraceServiceResponse on the way out.
type floorMsg struct{}

type floorCodec struct{}

func (floorCodec) Marshal(any) (mem.BufferSlice, error) { return nil, nil }
func (floorCodec) Unmarshal(mem.BufferSlice, any) error { return nil }
func (floorCodec) Name() string                         { return "proto" }

// measureGRPCFloor starts the floor server and measures it as
// measurePhase measures a node agent: idle, then under the load.
func measureGRPCFloor(idle, warm, secs time.Duration) (phaseFigures, error) {
	f := phaseFigures{name: "grpc-go floor"}
	addr, err := freeAddr()
	if err != nil {
		return f, err
	}
	self, err := os.Executable()
	if err != nil {
		return f, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), floorAddrEnv+"="+addr)
	// One P, as spikehunt-agent runs by default (runtime.gomaxprocs): with
	// two, the floor measured a quarter higher here, the runtime waking an
	// idle P for each message.
	cmd.Env = append(cmd.Env, "GOMAXPROCS=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out := &tailBuffer{max: 4 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return f, fmt.Errorf("start the grpc floor: %w", err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if err := waitListening(addr, 30*time.Second); err != nil {
		return f, fmt.Errorf("the grpc floor: %w; its output:\n%s", err, out.String())
	}
	pid := cmd.Process.Pid
	f.idleCPUPct = idleCPUPct(pid, idle)
	var counts loadCounts
	stopLoad := startLoad(nodeLoad, addr, &counts)
	defer stopLoad()
	time.Sleep(warm)
	acc0, cpu0, t0 := counts.accepted.Load(), procCPUSeconds(pid), time.Now()
	time.Sleep(secs)
	cpu1, acc1, wall := procCPUSeconds(pid), counts.accepted.Load(), time.Since(t0).Seconds()
	if err := stopLoad(); err != nil {
		return f, err
	}
	f.wall, f.cpuPct, f.accepted = wall, 100*(cpu1-cpu0)/wall, acc1-acc0
	f.sentTotal, f.acceptedTotal, f.failedTotal = counts.sent.Load(), counts.accepted.Load(), counts.failed.Load()
	f.missedTotal = counts.missed.Load()
	if got, want := f.spansPerS(), 0.9*float64(nodeLoad.Rate); got < want {
		return f, fmt.Errorf("the grpc floor accepted %.0f spans/s of the %d sent: below 90%%", got, nodeLoad.Rate)
	}
	if f.failedTotal > 0 {
		return f, fmt.Errorf("the grpc floor refused %d spans: %v", f.failedTotal, counts.lastErr.Load())
	}
	return f, nil
}
