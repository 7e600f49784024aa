package export

import (
	"context"
	"io"
	"net"
	"syscall"
	"unsafe"
)

// dialBroker dials a Kafka broker (franz-go's own dialer, with its 10 s
// timeout) and returns a connection whose Read and Write are raw system
// calls on the non-blocking socket.
//
// Why: the agent runs with one P, and a read or write through the net
// package enters the runtime's syscall path, which wakes the sysmon
// thread when it sleeps; awake, sysmon polls every 20 µs for as long as
// the P stays busy and hands the P to another thread when a call lasts
// longer than a poll (a loopback write to the broker often does). Per
// produce request those wake-ups cost more than the request. A raw call
// returns at once with data or EAGAIN; on EAGAIN RawConn parks the
// goroutine in the netpoller, which also enforces the deadlines franz-go
// sets, so timeouts and Close behave as with the plain connection. The
// intake reads its datagrams the same way (intake/line_read_linux.go).
func dialBroker(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: dialTimeout}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c, nil
	}
	return &rawIOConn{TCPConn: tc, rc: rc}, nil
}

// rawIOConn is a TCP connection with raw, non-blocking Read and Write;
// everything else (deadlines, Close, addresses) is the TCPConn's.
type rawIOConn struct {
	*net.TCPConn
	rc syscall.RawConn
}

func (c *rawIOConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait in the netpoller
			}
			n, errno = int(r), e
			return true
		}
	})
	switch {
	case err != nil: // a deadline, or the connection closed
		return 0, err
	case errno != 0:
		return 0, c.opError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of b, as net.Conn requires, waiting in the netpoller
// whenever the socket buffer is full.
func (c *rawIOConn) Write(b []byte) (int, error) {
	var n int
	var errno syscall.Errno
	err := c.rc.Write(func(fd uintptr) bool {
		for n < len(b) {
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[n])), uintptr(len(b)-n))
			switch e {
			case 0:
				n += int(r)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				errno = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return n, err
	case errno != 0:
		return n, c.opError("write", errno)
	}
	return n, nil
}

func (c *rawIOConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
