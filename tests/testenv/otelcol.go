package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"
)

// StartCollector runs the gateway Collector (SPIKEHUNT_OTELCOL) with the
// config file at configPath and the extra environment (KAFKA_BROKERS=…,
// SPANS_TOPIC=…), on free OTLP ports, its own metrics off. It returns the
// OTLP/gRPC address once the Collector accepts connections; the test's
// cleanup stops it and, when the test failed, logs its last lines.
func StartCollector(t testing.TB, configPath string, env ...string) (grpcAddr string) {
	t.Helper()
	paths, err := Paths()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := paths.OtelcolBinary()
	if err != nil {
		t.Fatal(err)
	}
	ports, err := freePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr, httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	cmd := exec.Command(bin, "--config", "file:"+configPath)
	cmd.Env = append(append(os.Environ(), "OTLP_GRPC_ENDPOINT="+grpcAddr, "OTLP_HTTP_ENDPOINT="+httpAddr, "TELEMETRY_LEVEL=none"), env...)
	out := NewTailBuffer(64 << 10)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		if t.Failed() {
			t.Logf("collector output:\n%s", lastLines(out.String(), 30))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", grpcAddr); err == nil {
			c.Close()
			return grpcAddr
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the collector did not listen on %s:\n%s", grpcAddr, lastLines(out.String(), 30))
	return ""
}
