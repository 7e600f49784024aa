package collect

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ioctlEthtool reads driver statistics with the SIOCETHTOOL ioctl
// (ETHTOOL_GDRVINFO, ETHTOOL_GSTRINGS, ETHTOOL_GSTATS), which every kernel
// since 2.6 has; the netlink interface that replaces it (5.6+) is not
// needed for plain counters. It works on the interfaces of the network
// namespace the agent runs in: a DaemonSet needs hostNetwork.
type ioctlEthtool struct {
	mu    sync.Mutex
	fd    int // an AF_INET datagram socket, opened on first use; -1 until then
	names map[string][]string
	buf   []byte
}

func newIoctlEthtool() *ioctlEthtool { return &ioctlEthtool{fd: -1, names: map[string][]string{}} }

const (
	ethGStringLen = 32 // ETH_GSTRING_LEN
	ethSSStats    = 1  // ETH_SS_STATS, the string set of ETHTOOL_GSTATS
)

// Stats implements ethtoolSource. The names slice of an interface is kept
// until the driver's counter count changes.
func (e *ioctlEthtool) Stats(iface string) ([]string, []uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fd < 0 {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("ethtool socket: %w", err)
		}
		e.fd = fd
	}
	info, err := unix.IoctlGetEthtoolDrvinfo(e.fd, iface)
	if err != nil {
		return nil, nil, ethtoolError(iface, "GDRVINFO", err)
	}
	n := int(info.N_stats)
	if n == 0 {
		return nil, nil, fmt.Errorf("ethtool %s: driver %s: %w", iface, unix.ByteSliceToString(info.Driver[:]), ErrNotSupported)
	}
	names := e.names[iface]
	if len(names) != n {
		if names, err = e.strings(iface, n); err != nil {
			delete(e.names, iface)
			return nil, nil, err
		}
		e.names[iface] = names
	}
	values, err := e.stats(iface, n)
	if err != nil {
		return nil, nil, err
	}
	if len(values) != len(names) {
		delete(e.names, iface) // the set changed between the calls; refetch next time
		return nil, nil, fmt.Errorf("ethtool %s: counter set changed while reading", iface)
	}
	return names, values, nil
}

// Close closes the socket.
func (e *ioctlEthtool) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fd < 0 {
		return nil
	}
	err := unix.Close(e.fd)
	e.fd = -1
	return err
}

// slack over-sizes ioctl buffers: GSTRINGS and GSTATS write as many
// entries as the driver has *now*, whatever length user space passed, and
// the count can grow between GDRVINFO and the call (ethtool -L changing
// the number of queues). The ethtool tool has the same race.
func slack(n int) int { return n + max(n, 64) }

func (e *ioctlEthtool) strings(iface string, n int) ([]string, error) {
	const hdr = 12 // struct ethtool_gstrings: cmd, string_set, len
	buf := make([]byte, hdr+slack(n)*ethGStringLen)
	binary.NativeEndian.PutUint32(buf[0:], unix.ETHTOOL_GSTRINGS)
	binary.NativeEndian.PutUint32(buf[4:], ethSSStats)
	binary.NativeEndian.PutUint32(buf[8:], uint32(n))
	if err := e.ioctl(iface, buf); err != nil {
		return nil, ethtoolError(iface, "GSTRINGS", err)
	}
	got := int(binary.NativeEndian.Uint32(buf[8:]))
	if got > slack(n) {
		return nil, fmt.Errorf("ethtool %s: %d counter names, buffer held %d", iface, got, slack(n))
	}
	names := make([]string, got)
	for i := range names {
		names[i] = unix.ByteSliceToString(buf[hdr+i*ethGStringLen : hdr+(i+1)*ethGStringLen])
	}
	return names, nil
}

func (e *ioctlEthtool) stats(iface string, n int) ([]uint64, error) {
	const hdr = 8 // struct ethtool_stats: cmd, n_stats
	size := hdr + slack(n)*8
	if cap(e.buf) < size {
		e.buf = make([]byte, size)
	}
	buf := e.buf[:size]
	binary.NativeEndian.PutUint32(buf[0:], unix.ETHTOOL_GSTATS)
	binary.NativeEndian.PutUint32(buf[4:], uint32(n))
	if err := e.ioctl(iface, buf); err != nil {
		return nil, ethtoolError(iface, "GSTATS", err)
	}
	got := int(binary.NativeEndian.Uint32(buf[4:]))
	if got > slack(n) {
		return nil, fmt.Errorf("ethtool %s: %d counters, buffer held %d", iface, got, slack(n))
	}
	values := make([]uint64, got)
	for i := range values {
		values[i] = binary.NativeEndian.Uint64(buf[hdr+i*8:])
	}
	return values, nil
}

// ifreqData is struct ifreq with its union used as ifr_data.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

func (e *ioctlEthtool) ioctl(iface string, buf []byte) error {
	if len(iface) >= unix.IFNAMSIZ {
		return fmt.Errorf("interface name %q too long", iface)
	}
	var ifr ifreqData
	copy(ifr.name[:], iface)
	ifr.data = unsafe.Pointer(&buf[0])
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(e.fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(buf)
	if errno != 0 {
		return errno
	}
	return nil
}

func ethtoolError(iface, cmd string, err error) error {
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("ethtool %s %s: %w (%w)", iface, cmd, ErrNotSupported, err)
	}
	return fmt.Errorf("ethtool %s %s: %w", iface, cmd, err)
}
