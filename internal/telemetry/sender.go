package telemetry

import (
	"net/netip"
	"strconv"
)

// Sender is who sent a request, as far as the transport it came by can
// vouch for it: the kernel's word for the process behind a unix datagram
// (SCM_CREDENTIALS), the source address of a UDP datagram or a TCP
// connection. The intake fills it in and sets Trusted from its trigger
// allow-list; the capture engine lets only a trusted sender fire a
// capture, and rate-limits fires per sender (Key).
type Sender struct {
	// Source is the intake receiver: "unixgram", "udp", "otlp_grpc",
	// "otlp_http".
	Source string
	// HasCred says UID, GID and PID are the kernel's (unixgram on Linux).
	HasCred  bool
	UID, GID uint32
	PID      int32 // in the agent's pid namespace; for logs only
	// Addr is the source address; invalid when the receiver does not
	// know it.
	Addr netip.Addr
	// Trusted: the sender is on the trigger allow-list and may fire
	// captures. Requests from others are data only.
	Trusted bool
}

// SenderKey is what fires are rate-limited by: a uid on the unix socket
// (a local user cannot make new uids; pids are cheap), an address
// otherwise.
type SenderKey struct {
	UID     uint32
	HasCred bool
	Addr    netip.Addr
}

// Key is the sender's rate-limit key.
func (s *Sender) Key() SenderKey {
	if s.HasCred {
		return SenderKey{UID: s.UID, HasCred: true}
	}
	return SenderKey{Addr: s.Addr}
}

// String names the sender for a log line: "uid 1000 (pid 4711) on
// unixgram", "10.1.2.3 on udp", "an unknown sender on otlp_grpc".
func (s *Sender) String() string {
	switch {
	case s.HasCred:
		return "uid " + strconv.FormatUint(uint64(s.UID), 10) + " (pid " + strconv.FormatInt(int64(s.PID), 10) + ") on " + s.Source
	case s.Addr.IsValid():
		return s.Addr.String() + " on " + s.Source
	}
	return "an unknown sender on " + s.Source
}
