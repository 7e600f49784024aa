package intake

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// TriggerConfig says which senders may fire the capture engine's local
// trigger. Every sender's requests are received, sampled and exported
// alike; a request from a sender not listed here is data only: it never
// fires a capture (the capture engine counts it in
// spikehunt_capture_trigger_refused_total{reason="untrusted_sender"}).
//
// What a transport can vouch for decides what can be listed:
//   - The unix socket: the sending process's uid and gid, from the kernel
//     (SCM_CREDENTIALS; Linux). Root (uid 0) may always fire. The socket's
//     file mode only decides who may send at all.
//   - UDP: the source address, which a process with CAP_NET_RAW (the
//     default of many container runtimes) can forge and which cannot tell
//     two local users apart. No address is trusted by default; list the
//     networks of the apps whose slow requests should fire (the node's pod
//     CIDR, say), or send over the unix socket.
//   - OTLP: the TCP peer's address (never a forwarding header), judged
//     against CIDRs like a UDP source; a completed handshake cannot be
//     forged, but it still tells no local user apart.
type TriggerConfig struct {
	// UIDs may fire over the unix socket, besides root.
	UIDs []uint32 `yaml:"uids"`
	// GIDs may fire over the unix socket: the sender's effective group
	// (the group a pod's runAsGroup sets).
	GIDs []uint32 `yaml:"gids"`
	// AnyUID lets every process that can write the unix socket fire: the
	// socket's file mode and its folder's are then the only gate. Use it
	// where mounting the socket is itself the privilege (a hostPath that
	// admission control limits), not on a host with untrusted users.
	AnyUID bool `yaml:"any_uid"`
	// CIDRs may fire over UDP (and OTLP, see above): prefixes
	// ("10.244.0.0/16") or single addresses ("10.0.0.7").
	CIDRs []string `yaml:"cidrs"`
}

// Validate checks the allow-list; it does not change c.
func (c *TriggerConfig) Validate() error {
	var errs []error
	for _, s := range c.CIDRs {
		if _, err := parsePrefix(s); err != nil {
			errs = append(errs, fmt.Errorf("intake: trigger.cidrs: %q: want a prefix such as 10.244.0.0/16 or an address", s))
		}
	}
	return errors.Join(errs...)
}

func parsePrefix(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if p.Addr().Is4In6() {
		// ::ffff:10.0.0.0/104 means 10.0.0.0/8: addresses are unmapped
		// before they are matched.
		if p.Bits() < 96 {
			return netip.Prefix{}, fmt.Errorf("a v4-mapped prefix shorter than /96")
		}
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked(), nil
	}
	return p.Masked(), nil
}

// trustPolicy is a TriggerConfig ready to decide, per datagram or
// request: a few comparisons, no allocation, no per-sender state.
type trustPolicy struct {
	uids, gids []uint32
	anyUID     bool
	prefixes   []netip.Prefix
	everyAddr  bool // prefixes cover all of IPv4 and IPv6
}

func newTrustPolicy(c TriggerConfig) trustPolicy {
	p := trustPolicy{uids: slices.Clone(c.UIDs), gids: slices.Clone(c.GIDs), anyUID: c.AnyUID}
	var all4, all6 bool
	for _, s := range c.CIDRs {
		pf, err := parsePrefix(s)
		if err != nil {
			continue // Validate reported it
		}
		p.prefixes = append(p.prefixes, pf)
		if pf.Bits() == 0 {
			all4, all6 = all4 || pf.Addr().Is4(), all6 || pf.Addr().Is6()
		}
	}
	p.everyAddr = all4 && all6
	return p
}

// decide sets s.Trusted from what s carries.
func (p *trustPolicy) decide(s *telemetry.Sender) {
	switch {
	case s.HasCred:
		s.Trusted = s.UID == 0 || p.anyUID || slices.Contains(p.uids, s.UID) || slices.Contains(p.gids, s.GID)
	case s.Source == SourceUnixgram:
		// No credentials (not Linux): only "anyone who can write the
		// socket" admits the sender.
		s.Trusted = p.anyUID
	case s.Addr.IsValid():
		s.Trusted = p.addr(s.Addr)
	default:
		s.Trusted = p.everyAddr
	}
}

func (p *trustPolicy) addr(a netip.Addr) bool {
	a = a.Unmap()
	for _, pf := range p.prefixes {
		if pf.Contains(a) {
			return true
		}
	}
	return false
}

// senderAt is the judged sender of a request that came from addr over a
// connection (an OTLP receiver's peer: gRPC's peer.Addr, HTTP's
// RemoteAddr parsed). A TCP peer's address is the kernel's: it cannot be
// forged without completing the handshake. consumeTraces judges each OTLP
// request's peer this way, once per request.
func (in *Intake) senderAt(src *sourceMetrics, addr net.Addr) telemetry.Sender {
	s := telemetry.Sender{Source: src.name}
	switch a := addr.(type) {
	case *net.TCPAddr:
		s.Addr = a.AddrPort().Addr().Unmap()
	case *net.UDPAddr:
		s.Addr = a.AddrPort().Addr().Unmap()
	}
	in.trust.decide(&s)
	return s
}
