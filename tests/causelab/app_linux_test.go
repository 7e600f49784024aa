package causelab

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sys/unix"

	"github.com/spikehunt/spikehunt/tests/shopapp"
)

// The lab's processes are this test binary run again with roleEnv set:
// "shop", the app (tests/shopapp's handler, instrumented with the OTel
// SDK, reporting to the agent over OTLP/gRPC), and "burn", a CPU hog. Each
// first joins the cgroups named in cgroupsEnv, so that it runs in them
// from its first request on.
const (
	roleEnv     = "SPIKEHUNT_CAUSELAB_ROLE"
	cgroupsEnv  = "SPIKEHUNT_CAUSELAB_CGROUPS" // cgroup directories, ":"-separated
	otlpEnv     = "SPIKEHUNT_CAUSELAB_OTLP"    // the agent's OTLP/gRPC host:port
	serviceEnv  = "SPIKEHUNT_CAUSELAB_SERVICE"
	addrFileEnv = "SPIKEHUNT_CAUSELAB_ADDR_FILE" // where the app writes its address
	backlogEnv  = "SPIKEHUNT_CAUSELAB_BACKLOG"   // the app's listen backlog (0: the system's)
	burnEnv     = "SPIKEHUNT_CAUSELAB_BURN"      // threads,duration of a burn
)

// requestStartHeader carries the time the load generator sent the request
// (Unix nanoseconds), as a load balancer's X-Request-Start does: the app's
// span starts there, so the time a request waited for the app — in the
// listen queue, in a SYN retry, behind a throttled or starved process — is
// in its latency, as its client saw it. A span timed from the handler's
// first instruction would miss every stall that happens before it.
const requestStartHeader = "X-Request-Start"

// joinCgroups moves this process into each of the cgroups in env.
func joinCgroups() error {
	for _, d := range strings.Split(os.Getenv(cgroupsEnv), ":") {
		if d == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return fmt.Errorf("join cgroup %s: %w", d, err)
		}
	}
	return nil
}

// shopMain is the app: /fast and /stall from tests/shopapp, and
// /lab/alloc, which for the next ms milliseconds makes each request map,
// touch and unmap mb MiB of fresh memory in its own thread (the allocation
// burst of a request path that builds a large buffer).
func shopMain() int {
	if err := joinCgroups(); err != nil {
		fmt.Fprintln(os.Stderr, "shop:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(os.Getenv(otlpEnv)), otlptracegrpc.WithInsecure())
	if err != nil {
		fmt.Fprintln(os.Stderr, "shop: exporter:", err)
		return 2
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(200*time.Millisecond), sdktrace.WithMaxQueueSize(50_000)),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", os.Getenv(serviceEnv)))))
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tp.Shutdown(c)
	}()
	backlog, _ := strconv.Atoi(os.Getenv(backlogEnv))
	ln, err := listen(backlog)
	if err != nil {
		fmt.Fprintln(os.Stderr, "shop: listen:", err)
		return 2
	}
	h := &labShop{app: &shopapp.App{StallFor: time.Second}, tracer: tp.Tracer("causelab-shop"), allocating: make(chan struct{}, 2)}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	if err := os.WriteFile(os.Getenv(addrFileEnv), []byte(ln.Addr().String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "shop:", err)
		return 2
	}
	<-ctx.Done()
	c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	srv.Shutdown(c)
	return 0
}

// listen listens on a loopback port with the given backlog (0: the
// system's somaxconn, as net.Listen does).
func listen(backlog int) (net.Listener, error) {
	if backlog <= 0 {
		return net.Listen("tcp", "127.0.0.1:0")
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.Listen(fd, backlog); err != nil {
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "listener")
	defer f.Close()
	return net.FileListener(f)
}

type labShop struct {
	app        *shopapp.App
	tracer     trace.Tracer
	allocUntil atomic.Int64 // Unix nanoseconds
	allocMB    atomic.Int64
	allocating chan struct{}
}

func (s *labShop) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/lab/alloc" {
		mb, _ := strconv.Atoi(r.URL.Query().Get("mb"))
		ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
		s.allocMB.Store(int64(mb))
		s.allocUntil.Store(time.Now().Add(time.Duration(ms) * time.Millisecond).UnixNano())
		w.Write([]byte("ok\n"))
		return
	}
	if r.URL.Path != "/fast" && r.URL.Path != "/stall" {
		s.app.ServeHTTP(w, r)
		return
	}
	begun := time.Now()
	start := begun
	if ns, err := strconv.ParseInt(r.Header.Get(requestStartHeader), 10, 64); err == nil {
		if t := time.Unix(0, ns); t.Before(begun) && begun.Sub(t) < time.Minute {
			start = t
		}
	}
	// The thread stays the request's from here to its end (shopapp's own
	// lock of the thread nests inside this one), so the span's thread.id
	// is the thread the capture's analysis follows.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	if time.Now().UnixNano() < s.allocUntil.Load() {
		// At most two requests build their buffer at once, as a pool
		// would: the burst must reclaim, not run the cgroup out of memory.
		s.allocating <- struct{}{}
		touchFresh(int(s.allocMB.Load()) << 20)
		<-s.allocating
	}
	s.app.ServeHTTP(w, r)
	end := time.Now()
	_, sp := s.tracer.Start(r.Context(), "GET "+r.URL.Path, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.route", r.URL.Path), attribute.Int("http.response.status_code", 200),
			attribute.Int("thread.id", tid)))
	sp.End(trace.WithTimestamp(end))
}

// touchFresh maps n bytes of anonymous memory, writes every page, and
// unmaps it: each page is a fault charged to the process's memory cgroup.
func touchFresh(n int) {
	if n <= 0 {
		return
	}
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return
	}
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	unix.Munmap(b)
}

// burnMain spins threads for a duration: "threads,duration".
func burnMain() int {
	if err := joinCgroups(); err != nil {
		fmt.Fprintln(os.Stderr, "burn:", err)
		return 2
	}
	spec := strings.SplitN(os.Getenv(burnEnv), ",", 2)
	threads, _ := strconv.Atoi(spec[0])
	d, err := time.ParseDuration(spec[len(spec)-1])
	if threads < 1 || err != nil {
		fmt.Fprintln(os.Stderr, "burn: bad", burnEnv, os.Getenv(burnEnv))
		return 2
	}
	runtime.GOMAXPROCS(threads + 1)
	end := time.Now().Add(d)
	done := make(chan struct{})
	for range threads {
		go func() {
			runtime.LockOSThread()
			// The hog's threads are named as such, so that a verdict
			// naming the task a request waited behind names the hog.
			name := []byte("cpuhog\x00")
			unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0)
			x := 0
			for time.Now().Before(end) {
				for i := 0; i < 100000; i++ {
					x += i
				}
			}
			_ = x
			done <- struct{}{}
		}()
	}
	for range threads {
		<-done
	}
	return 0
}
