//go:build !linux

package export

import (
	"context"
	"net"
)

// dialBroker dials a Kafka broker as franz-go would (see the Linux version
// for why it is ours).
func dialBroker(ctx context.Context, network, addr string) (net.Conn, error) {
	return (&net.Dialer{Timeout: dialTimeout}).DialContext(ctx, network, addr)
}
