package perf

import (
	"bytes"
	"errors"
	"strconv"

	"github.com/spikehunt/spikehunt/internal/capture/explain"
)

// The listen queues' overflows have no cheap tracepoint: a SYN dropped at
// a full accept queue is freed with consume_skb (skb:consume_skb fires on
// every normal free, far too often to record), and skb:kfree_skb names
// TCP_LISTEN_OVERFLOW only for the handshake's last ACK. The kernel
// counts both in TcpExt's ListenOverflows and ListenDrops, so the
// recorder reads /proc/net/netstat — one file of a few KiB — at each of
// its samples while armed, and a verdict holds a request against the
// counters' growth while it was served. They are the recorder's network
// namespace's: the host's for an agent on the host network.

// netstatFile is where the counters are read.
const netstatFile = "/proc/net/netstat"

// parseListenStat reads ListenOverflows and ListenDrops from the TcpExt
// lines of /proc/net/netstat (a line of names, then a line of values).
func parseListenStat(b []byte) (explain.ListenStat, error) {
	var names []string
	for line := range bytes.Lines(b) {
		rest, ok := bytes.CutPrefix(line, []byte("TcpExt:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if names == nil {
			for _, n := range f {
				names = append(names, string(n))
			}
			continue
		}
		var st explain.ListenStat
		found := 0
		for i, n := range names {
			if i >= len(f) || (n != "ListenOverflows" && n != "ListenDrops") {
				continue
			}
			v, err := strconv.ParseUint(string(f[i]), 10, 64)
			if err != nil {
				return st, err
			}
			if n == "ListenOverflows" {
				st.Overflows = v
			} else {
				st.Drops = v
			}
			found++
		}
		if found < 2 {
			return st, errors.New("netstat: TcpExt has no ListenOverflows and ListenDrops")
		}
		return st, nil
	}
	return explain.ListenStat{}, errors.New("netstat: no TcpExt lines")
}
