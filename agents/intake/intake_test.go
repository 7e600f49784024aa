package intake

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

func TestStartReportsBindErrorsAndReleasesWhatItBound(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := testConfig(t)
	cfg.OTLPHTTP = busy.Addr().String() // bound after gRPC, before the datagram sockets
	in, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	err = in.Start(t.Context())
	want := "otlp http: listen tcp " + busy.Addr().String() + ": bind: address already in use"
	if err == nil || err.Error() != want {
		t.Fatalf("Start: %v, want %q", err, want)
	}
	// Nothing stays bound: the same config works once the port is free.
	busy.Close()
	again := startIntake(t, cfg)
	if again.Addrs().OTLPHTTP != cfg.OTLPHTTP {
		t.Errorf("OTLPHTTP bound at %s, want %s", again.Addrs().OTLPHTTP, cfg.OTLPHTTP)
	}
}

func TestLifecycle(t *testing.T) {
	cfg := testConfig(t)
	in := startIntake(t, cfg)
	a := in.Addrs()
	for name, addr := range map[string]string{"otlp grpc": a.OTLPGRPC, "otlp http": a.OTLPHTTP, "udp": a.LineUDP} {
		if strings.HasSuffix(addr, ":0") || addr == "" {
			t.Errorf("%s address %q: want the bound port", name, addr)
		}
	}
	if err := in.Start(t.Context()); err == nil {
		t.Error("a second Start succeeded")
	}
	if _, err := os.Stat(cfg.LineUnix); err != nil {
		t.Fatalf("socket file: %v", err)
	}
	sendDatagram(t, "unixgram", a.LineUnix, []byte("billy /x 1 200"))
	waitFor(t, 5*time.Second, "the request", func() bool { return len(in.Out()) == 1 })

	done := make(chan error)
	go func() { done <- in.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	// What was queued is still read; then Out is closed.
	if _, ok := <-in.Out(); !ok {
		t.Error("the queued request was lost in Close")
	}
	if _, ok := <-in.Out(); ok {
		t.Error("Out is open after Close")
	}
	if _, err := os.Stat(cfg.LineUnix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file after Close: %v, want it removed", err)
	}
	if _, err := net.Dial("tcp", a.OTLPGRPC); err == nil {
		t.Error("the gRPC port still accepts after Close")
	}
	if err := in.Start(t.Context()); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close: %v, want ErrClosed", err)
	}
	if err := in.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestCloseWithoutStart(t *testing.T) {
	in, err := New(testConfig(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-in.Out(); ok {
		t.Error("Out is open after Close")
	}
}
