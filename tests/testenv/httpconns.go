package testenv

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// KeepAliveGET sends one GET for path on a fresh connection to addr
// (network "tcp" or "unix"), reads the whole answer and returns the
// connection, still open, with the answer's status. A server that is
// still starting is dialled again for up to 5 s. The connection is closed
// at the test's end.
func KeepAliveGET(t testing.TB, network, addr, path string) (net.Conn, int) {
	t.Helper()
	var c net.Conn
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err = net.Dial(network, addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: spikehunt\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	c.SetDeadline(time.Time{})
	return c, resp.StatusCode
}

// CheckIdleConnsClosed fails t unless the server closes every one of conns
// (each idle after a request) within d.
func CheckIdleConnsClosed(t testing.TB, conns []net.Conn, d time.Duration) {
	t.Helper()
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(d))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("connection %d of %d still open %v after its last request: %v", i+1, len(conns), d, err)
		}
	}
}

// CheckConnectionCap fails t unless a server capped at max connections
// leaves one more unanswered while max are held open, and answers it once
// one of them is let go.
func CheckConnectionCap(t testing.TB, addr, path string, max int) {
	t.Helper()
	held := make([]net.Conn, max)
	for i := range held {
		held[i], _ = KeepAliveGET(t, "tcp", addr, path)
	}
	extra, err := net.Dial("tcp", addr) // the kernel accepts; the server does not
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	io.WriteString(extra, "GET "+path+" HTTP/1.1\r\nHost: spikehunt\r\n\r\n")
	extra.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := extra.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection %d was answered while %d were held (err %v)", max+1, max, err)
	}
	held[0].Close()
	extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(extra), nil)
	if err != nil {
		t.Fatalf("connection %d after one was let go: %v", max+1, err)
	}
	resp.Body.Close()
}
