//go:build !unix

package intake

import (
	"context"
	"fmt"
	"net"
	"runtime"
)

// listenUnixgram fails: Windows has unix stream sockets but no datagram
// ones.
func (in *Intake) listenUnixgram(context.Context) (net.PacketConn, error) {
	return nil, fmt.Errorf("line unixgram: unix datagram sockets are not supported on %s: leave line_unix empty and use line_udp", runtime.GOOS)
}
