package collect

import (
	"bytes"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// /proc/net/snmp and /proc/net/netstat: the IP stack's MIB counters, as
// pairs of lines, a header of names and a row of values under the same
// "Proto:" prefix. The ones read are those that turn into a client's
// latency: a retransmission waits for a timeout, a SYN dropped at a full
// listen queue is retried by the client after a second, a datagram
// dropped at a full receive buffer is never answered.
//
// Both files describe the network namespace of the reading process, not
// the host: a DaemonSet needs hostNetwork: true, as for ethtool.

func init() { registerSampler("netsnmp", fastCadence, newNetSNMPSampler) }

// snmpCounter indexes snmpReading.
type snmpCounter int

const (
	snmpRetransSegs snmpCounter = iota
	snmpTimeouts
	snmpSynRetrans
	snmpListenOverflows
	snmpListenDrops
	snmpBacklogDrop
	snmpUDPRcvbufErrors
	snmpUDPCsumErrors
	snmpCounters
)

// snmpFields are the counters read: the section and name the kernel
// prints them under, and the metric each becomes.
var snmpFields = [snmpCounters]struct {
	proto, name, metric, unit string
}{
	snmpRetransSegs:     {"Tcp", "RetransSegs", "spikehunt.tcp.retransmits", "{segment}"},
	snmpTimeouts:        {"TcpExt", "TCPTimeouts", "spikehunt.tcp.timeouts", "{timeout}"},
	snmpSynRetrans:      {"TcpExt", "TCPSynRetrans", "spikehunt.tcp.syn_retransmits", "{segment}"},
	snmpListenOverflows: {"TcpExt", "ListenOverflows", "spikehunt.tcp.listen_overflows", "{connection}"},
	snmpListenDrops:     {"TcpExt", "ListenDrops", "spikehunt.tcp.listen_drops", "{connection}"},
	snmpBacklogDrop:     {"TcpExt", "TCPBacklogDrop", "spikehunt.tcp.backlog_drops", "{segment}"},
	snmpUDPRcvbufErrors: {"Udp", "RcvbufErrors", "spikehunt.udp.rcvbuf_errors", "{datagram}"},
	snmpUDPCsumErrors:   {"Udp", "InCsumErrors", "spikehunt.udp.csum_errors", "{datagram}"},
}

type netSNMPSampler struct {
	env       *env
	fileCache // files stay open between passes; Close closes them
	snmp, ext []byte
	readings
	resetTally
	counts counterSet[snmpCounter]
}

func newNetSNMPSampler(e *env) (sampler, error) {
	s := &netSNMPSampler{env: e}
	s.counts = newCounterSet[snmpCounter](&s.resetTally)
	return s, nil
}

func (s *netSNMPSampler) sample(dst []telemetry.Point) ([]telemetry.Point, error) {
	var err error
	if s.snmp, err = s.read(s.env.procPath("net", "snmp"), s.snmp); err != nil {
		return dst, err
	}
	if s.ext, err = s.read(s.env.procPath("net", "netstat"), s.ext); err != nil {
		return dst, err
	}
	now := s.env.tl.now()
	var r snmpReading
	if err := parseNetSNMP(s.snmp, &r); err != nil {
		return dst, err
	}
	if err := parseNetSNMP(s.ext, &r); err != nil {
		return dst, err
	}
	if !r.has[snmpRetransSegs] || !r.has[snmpListenOverflows] {
		return dst, malformed("/proc/net/snmp and netstat: no Tcp RetransSegs or TcpExt ListenOverflows")
	}
	out := sink{pts: dst}
	out.start, out.end, out.emit = s.advance(s.env.tl, now)
	for c := range snmpCounters {
		if !r.has[c] {
			continue // a counter older kernels lack (Udp InCsumErrors: 3.10)
		}
		if d, ok := s.counts.delta(c, r.values[c]); ok {
			out.add(snmpFields[c].metric, snmpFields[c].unit, float64(d))
		}
	}
	s.counts.commit()
	return out.pts, nil
}

// snmpReading holds the counters found in one or both files.
type snmpReading struct {
	values [snmpCounters]uint64
	has    [snmpCounters]bool
}

// parseNetSNMP reads the counters of snmpFields found in b, a
// /proc/net/snmp or /proc/net/netstat, into r. Each section is a header
// line of names and a line of values with the same prefix and as many
// fields. Only the values read must be unsigned numbers: others may be
// signed (Tcp MaxConn is -1).
func parseNetSNMP(b []byte, r *snmpReading) error {
	for len(b) > 0 {
		var names, vals []byte
		names, b = nextLine(b)
		if len(trimBlank(names)) == 0 {
			continue
		}
		vals, b = nextLine(b)
		proto, nameRest := nextField(names)
		vproto, valRest := nextField(vals)
		if len(proto) < 2 || proto[len(proto)-1] != ':' || !bytes.Equal(proto, vproto) {
			return malformed("net snmp: header %q is not followed by its values (%q)", proto, vproto)
		}
		proto = proto[:len(proto)-1]
		relevant := string(proto) == "Tcp" || string(proto) == "TcpExt" || string(proto) == "Udp"
		for {
			var n, v []byte
			n, nameRest = nextField(nameRest)
			v, valRest = nextField(valRest)
			if len(n) == 0 && len(v) == 0 {
				break
			}
			if len(n) == 0 || len(v) == 0 {
				return malformed("net snmp %s: not as many values as names", proto)
			}
			if !relevant {
				continue
			}
			for c := range snmpCounters {
				f := &snmpFields[c]
				if f.name != string(n) || f.proto != string(proto) {
					continue
				}
				x, err := parseUint(v)
				if err != nil {
					return malformed("net snmp %s %s: %v", proto, n, err)
				}
				r.values[c], r.has[c] = x, true
			}
		}
	}
	return nil
}
