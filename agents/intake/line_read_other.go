//go:build !linux

package intake

import "net"

// datagramReader reads datagrams through the net package.
type datagramReader struct {
	pc net.PacketConn
}

func newDatagramReader(pc net.PacketConn) (datagramReader, error) {
	return datagramReader{pc: pc}, nil
}

// read reads one datagram into buf. A datagram that fills buf may have
// been truncated; the caller's buf is one byte larger than the largest it
// accepts, which tells the two apart.
func (r datagramReader) read(buf []byte) (int, error) {
	n, _, err := r.pc.ReadFrom(buf)
	return n, err
}
