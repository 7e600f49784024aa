package causelab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
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
	netnsEnv    = "SPIKEHUNT_CAUSELAB_NETNS"     // a network namespace (a path) the app listens in
	listenEnv   = "SPIKEHUNT_CAUSELAB_LISTEN"    // the app's listen address (default 127.0.0.1:0)
	floodEnv    = "SPIKEHUNT_CAUSELAB_FLOOD"     // cpu,target,duration of a UDP flood
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
	ln, err := listenIn(os.Getenv(netnsEnv), os.Getenv(listenEnv), backlog)
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

// listenIn listens on addr (default a loopback port) with the given
// backlog (0: the system's somaxconn, as net.Listen does). With netns
// set, the socket is made in that network namespace — a socket belongs to
// the namespace it was created in — by one thread that enters it and
// comes back; the rest of the app (its OTLP exporter to the agent on
// loopback) stays in the lab's namespace.
func listenIn(netns, addr string, backlog int) (net.Listener, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if netns == "" {
		return listen(addr, backlog)
	}
	runtime.LockOSThread()
	// The thread is not unlocked if it cannot return to its namespace:
	// the runtime then ends it with the goroutine instead of reusing it.
	back, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer back.Close()
	target, err := os.Open(netns)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("enter %s: %w", netns, err)
	}
	ln, lerr := listen(addr, backlog)
	if err := unix.Setns(int(back.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, errors.Join(lerr, fmt.Errorf("return from %s: %w", netns, err))
	}
	runtime.UnlockOSThread()
	return ln, lerr
}

// listen makes the listening socket on this thread.
func listen(addr string, backlog int) (net.Listener, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return nil, fmt.Errorf("listen address %q: want IPv4 host:port", addr)
	}
	if backlog <= 0 {
		backlog = unix.SOMAXCONN
		if b, err := os.ReadFile("/proc/sys/net/core/somaxconn"); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				backlog = n
			}
		}
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}); err != nil {
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
	writeUntil atomic.Int64 // Unix nanoseconds
	writePath  atomic.Pointer[string]
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
	if r.URL.Path == "/lab/io" {
		path := r.URL.Query().Get("path")
		ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
		s.writePath.Store(&path)
		s.writeUntil.Store(time.Now().Add(time.Duration(ms) * time.Millisecond).UnixNano())
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
	if time.Now().UnixNano() < s.writeUntil.Load() {
		// The request appends a record to the app's journal and waits
		// for the device to have it: the request path's own synchronous
		// IO.
		writeSynced(*s.writePath.Load())
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

// writeSynced writes one 4 KiB block at the start of path, direct and
// synced: the request waits for the device to take it.
func writeSynced(path string) {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_DIRECT|unix.O_DSYNC|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	// O_DIRECT wants an aligned buffer: an anonymous mapping is.
	b, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return
	}
	defer unix.Munmap(b)
	b[0] = 1
	unix.Pwrite(fd, b, 0)
}

// floodMain sends UDP datagrams to target from one thread pinned to cpu
// for a duration: "cpu,host:port,duration".
func floodMain() int {
	spec := strings.Split(os.Getenv(floodEnv), ",")
	if len(spec) != 3 {
		fmt.Fprintln(os.Stderr, "flood: bad", floodEnv, os.Getenv(floodEnv))
		return 2
	}
	cpu, err1 := strconv.Atoi(spec[0])
	target, err2 := netip.ParseAddrPort(spec[1])
	d, err3 := time.ParseDuration(spec[2])
	if err := errors.Join(err1, err2, err3); err != nil || !target.Addr().Is4() {
		fmt.Fprintln(os.Stderr, "flood: bad", floodEnv, os.Getenv(floodEnv), err)
		return 2
	}
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		fmt.Fprintln(os.Stderr, "flood: pin:", err)
		return 2
	}
	name := []byte("netflood\x00")
	unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0)
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "flood:", err)
		return 2
	}
	defer unix.Close(fd)
	// Unconnected: the port unreachable the peer answers with is not
	// reported to the next send. Each datagram is near the largest UDP
	// takes, so the sender's one system call is some 40 fragments of the
	// veth's MTU that the receiving CPU must take in and reassemble.
	to := &unix.SockaddrInet4{Addr: target.Addr().As4(), Port: int(target.Port())}
	payload := make([]byte, floodDatagram)
	end := time.Now().Add(d)
	for sent := 0; ; sent++ {
		// A datagram the host cannot queue (ENOBUFS) is sent again: the
		// flood goes on.
		unix.Sendto(fd, payload, 0, to)
		if sent%64 == 0 && !time.Now().Before(end) {
			return 0
		}
	}
}

// floodDatagram is the size of the flood's datagrams.
const floodDatagram = 60_000

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
