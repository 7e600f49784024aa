package intake

import (
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// datagramReader reads datagrams with a raw, non-blocking recvmsg(2),
// and with each the sender: its address (UDP) or the kernel's word on the
// sending process (unixgram: SO_PASSCRED makes the kernel attach every
// datagram's SCM_CREDENTIALS, whether the sender sent any or not; a
// sender may claim other credentials only with CAP_SETUID / CAP_SYS_ADMIN,
// i.e. when it is root already).
//
// The socket is non-blocking, so recvmsg returns at once: with data, or
// with EAGAIN, on which RawConn.Read parks the goroutine in the netpoller
// until the socket is readable. A raw system call skips the runtime's
// syscall bookkeeping, which on an idle process wakes the sysmon thread
// on every call; at a datagram every few milliseconds those wake-ups cost
// more CPU than reading the data. MSG_TRUNC makes recvmsg return a
// datagram's real length, so a truncated one is told exactly.
//
// A reader is used by one goroutine: it owns the message header and the
// buffers for the address and the credentials.
type datagramReader struct {
	rc   syscall.RawConn
	unix bool
	hdr  syscall.Msghdr
	iov  syscall.Iovec
	name syscall.RawSockaddrAny
	oob  [64]byte // one SCM_CREDENTIALS message needs 32
}

func newDatagramReader(pc net.PacketConn) (*datagramReader, error) {
	sc, ok := pc.(syscall.Conn)
	if !ok {
		return nil, errNoRawConn
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &datagramReader{rc: rc, unix: pc.LocalAddr().Network() == "unixgram"}, nil
}

// setPassCred has the kernel attach the sender's credentials to every
// datagram of the unix socket pc. It must be set before the first
// datagram is sent: one queued before carries none (the kernel then
// reports pid 0 and the overflow uid).
func setPassCred(pc net.PacketConn) error {
	sc, ok := pc.(syscall.Conn)
	if !ok {
		return errNoRawConn
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_PASSCRED, 1)
	}); err != nil {
		return err
	}
	return serr
}

// read reads one datagram into buf, fills from with its sender (all but
// Source and Trusted), and returns its full length, which is larger than
// len(buf) when it was truncated. The error is net.ErrClosed once the
// socket is closed.
func (r *datagramReader) read(buf []byte, from *telemetry.Sender) (int, error) {
	var n int
	var rerr error
	err := r.rc.Read(func(fd uintptr) bool {
		for {
			r.iov.Base, r.iov.Len = &buf[0], uint64(len(buf))
			r.hdr = syscall.Msghdr{Iov: &r.iov, Iovlen: 1}
			if r.unix {
				r.hdr.Control, r.hdr.Controllen = &r.oob[0], uint64(len(r.oob))
			} else {
				r.hdr.Name, r.hdr.Namelen = (*byte)(unsafe.Pointer(&r.name)), syscall.SizeofSockaddrAny
			}
			m, _, e := syscall.RawSyscall(syscall.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&r.hdr)),
				syscall.MSG_TRUNC|syscall.MSG_DONTWAIT)
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
	if rerr == nil {
		r.sender(from)
	}
	return n, rerr
}

// sender reads the sender of the datagram just received.
func (r *datagramReader) sender(from *telemetry.Sender) {
	*from = telemetry.Sender{Source: from.Source}
	if r.unix {
		if r.hdr.Flags&syscall.MSG_CTRUNC == 0 {
			from.UID, from.GID, from.PID, from.HasCred = parseCredentials(r.oob[:r.hdr.Controllen])
		}
		// The kernel's stand-in for credentials it does not have (a
		// datagram queued before SO_PASSCRED) or cannot map into the
		// agent's user namespace: no one's.
		if from.UID == overflowID && from.PID == 0 {
			from.HasCred = false
		}
		return
	}
	switch r.name.Addr.Family {
	case syscall.AF_INET:
		sa := (*syscall.RawSockaddrInet4)(unsafe.Pointer(&r.name))
		from.Addr = netip.AddrFrom4(sa.Addr)
	case syscall.AF_INET6:
		sa := (*syscall.RawSockaddrInet6)(unsafe.Pointer(&r.name))
		from.Addr = netip.AddrFrom16(sa.Addr).Unmap()
	}
}

// overflowID is the kernel's default overflowuid and overflowgid.
const overflowID = 65534

// parseCredentials finds SCM_CREDENTIALS among the control messages in
// oob without allocating (syscall.ParseSocketControlMessage allocates a
// slice per call).
func parseCredentials(oob []byte) (uid, gid uint32, pid int32, ok bool) {
	hdrLen := syscall.CmsgLen(0)
	for len(oob) >= hdrLen {
		h := (*syscall.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < hdrLen || l > len(oob) {
			return 0, 0, 0, false
		}
		if h.Level == syscall.SOL_SOCKET && h.Type == syscall.SCM_CREDENTIALS && l >= syscall.CmsgLen(syscall.SizeofUcred) {
			c := (*syscall.Ucred)(unsafe.Pointer(&oob[hdrLen]))
			return c.Uid, c.Gid, c.Pid, true
		}
		next := syscall.CmsgSpace(l - hdrLen)
		if next > len(oob) {
			return 0, 0, 0, false
		}
		oob = oob[next:]
	}
	return 0, 0, 0, false
}
