package intake

import (
	"net"
	"syscall"
	"unsafe"
)

// datagramReader reads datagrams with a raw, non-blocking recvfrom(2).
//
// The socket is non-blocking, so recvfrom returns at once: with data, or
// with EAGAIN, on which RawConn.Read parks the goroutine in the netpoller
// until the socket is readable. A raw system call skips the runtime's
// syscall bookkeeping, which on an idle process wakes the sysmon thread
// on every call; at a datagram every few milliseconds those wake-ups cost
// more CPU than reading the data. MSG_TRUNC makes recvfrom return a
// datagram's real length, so a truncated one is told exactly.
type datagramReader struct {
	rc syscall.RawConn
}

func newDatagramReader(pc net.PacketConn) (datagramReader, error) {
	sc, ok := pc.(syscall.Conn)
	if !ok {
		return datagramReader{}, errNoRawConn
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return datagramReader{}, err
	}
	return datagramReader{rc: rc}, nil
}

// read reads one datagram into buf and returns its full length, which is
// larger than len(buf) when it was truncated. The error is net.ErrClosed
// once the socket is closed.
func (r datagramReader) read(buf []byte) (int, error) {
	var n int
	var rerr error
	err := r.rc.Read(func(fd uintptr) bool {
		for {
			m, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)),
				syscall.MSG_TRUNC|syscall.MSG_DONTWAIT, 0, 0)
			switch e {
			case 0:
				n = int(m)
				return true
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			default:
				rerr = e
				return true
			}
		}
	})
	if err != nil {
		return 0, err
	}
	return n, rerr
}
