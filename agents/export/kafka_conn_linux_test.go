package export

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"
)

// dialPair returns a connection from dialBroker and the listener's end.
func dialPair(t *testing.T) (*rawIOConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := dialBroker(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer := <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); peer.Close() })
	rc, ok := c.(*rawIOConn)
	if !ok {
		t.Fatalf("dialBroker returned a %T, want *rawIOConn", c)
	}
	return rc, peer
}

// A write far larger than the socket buffers fills them, waits in the
// netpoller and resumes: every byte arrives, in order, both ways.
func TestRawIOConnMovesLargeBuffersBothWays(t *testing.T) {
	c, peer := dialPair(t)
	want := make([]byte, 16<<20)
	for i := range want {
		want[i] = byte(rand.Uint32())
	}
	go func() { // echo, in small reads
		buf := make([]byte, 1500)
		for {
			n, err := peer.Read(buf)
			if n > 0 {
				if _, err := peer.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				peer.(*net.TCPConn).CloseWrite()
				return
			}
		}
	}()
	werr := make(chan error, 1)
	go func() {
		n, err := c.Write(want)
		if err == nil && n != len(want) {
			err = io.ErrShortWrite
		}
		c.CloseWrite()
		werr <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("echoed %d bytes that differ from the %d written", len(got), len(want))
	}
}

// franz-go times reads out with deadlines and tells a timeout by
// os.ErrDeadlineExceeded; a closed connection answers net.ErrClosed.
func TestRawIOConnKeepsDeadlinesAndClose(t *testing.T) {
	c, _ := dialPair(t)
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := c.Read(make([]byte, 16)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	c.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 16))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read on a closed connection: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a blocked read")
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write on a closed connection: %v, want net.ErrClosed", err)
	}
}

// A peer that closes is io.EOF to the reader, and a write that finds the
// peer gone fails instead of hanging.
func TestRawIOConnSeesThePeerGo(t *testing.T) {
	c, peer := dialPair(t)
	peer.Close()
	if _, err := c.Read(make([]byte, 16)); err != io.EOF {
		t.Fatalf("read after the peer closed: %v, want io.EOF", err)
	}
	var err error
	for i := 0; i < 100 && err == nil; i++ { // the first writes may still be taken
		_, err = c.Write(make([]byte, 64<<10))
	}
	if err == nil {
		t.Fatal("writes to a closed peer kept succeeding")
	}
}
