//go:build !linux

package intake

import (
	"net"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// datagramReader reads datagrams through the net package. It learns a UDP
// sender's address; a unix datagram's sender stays unknown (only Linux
// hands a datagram's credentials to the receiver).
type datagramReader struct {
	pc net.PacketConn
}

func newDatagramReader(pc net.PacketConn) (*datagramReader, error) {
	return &datagramReader{pc: pc}, nil
}

// read reads one datagram into buf and fills from with its sender (all
// but Source and Trusted). A datagram that fills buf may have been
// truncated; the caller's buf is one byte larger than the largest it
// accepts, which tells the two apart.
func (r *datagramReader) read(buf []byte, from *telemetry.Sender) (int, error) {
	n, addr, err := r.pc.ReadFrom(buf)
	*from = telemetry.Sender{Source: from.Source}
	if ua, ok := addr.(*net.UDPAddr); ok {
		from.Addr = ua.AddrPort().Addr().Unmap()
	}
	return n, err
}

// setPassCred does nothing: only Linux passes a datagram's credentials.
func setPassCred(net.PacketConn) error { return nil }
