package collect

import (
	"bytes"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// /proc/net/dev for every interface, lo and down ones included, each
// tagged with its operstate from sysfs (Linux 2.6.17+): an interface that
// is down but still receiving (the down interface (docs/field-stories.md): a hub fed a down NIC the traffic
// of its neighbour, at a cost of 38% of a CPU) is visible as exactly that.
//
// Some drivers still keep 32-bit counters that wrap at 4 Gi; a decrease is
// treated as a reset like any other (see counterSet), costing one interval.

func init() { registerSampler("netdev", fastCadence, newNetDevSampler) }

type netDevSampler struct {
	env       *env
	fileCache // files stay open between passes; Close closes them
	buf, ost  []byte
	readings
	resetTally
	counts rowSet[string] // by interface; columns are netDevMetrics
	cols   []colDelta
}

// Columns of /proc/net/dev, receive side then transmit side.
const (
	rxBytes, rxPackets, rxErrs, rxDrop = 0, 1, 2, 3
	txBytes, txPackets, txErrs, txDrop = 8, 9, 10, 11
	netDevColumns                      = 16
)

// netDevMetrics maps the columns reported to metric, unit and direction.
var netDevMetrics = []struct {
	field        int
	metric, unit string
	io           telemetry.Attr
}{
	{rxPackets, "system.network.packet.count", "{packet}", netReceive},
	{txPackets, "system.network.packet.count", "{packet}", netTransmit},
	{rxBytes, "system.network.io", "By", netReceive},
	{txBytes, "system.network.io", "By", netTransmit},
	{rxErrs, "system.network.errors", "{error}", netReceive},
	{txErrs, "system.network.errors", "{error}", netTransmit},
	{rxDrop, "system.network.packet.dropped", "{packet}", netReceive},
	{txDrop, "system.network.packet.dropped", "{packet}", netTransmit},
}

var (
	netReceive  = telemetry.Str("network.io.direction", "receive")
	netTransmit = telemetry.Str("network.io.direction", "transmit")
)

func newNetDevSampler(e *env) (sampler, error) {
	s := &netDevSampler{env: e}
	s.counts = newRowSet[string](&s.resetTally)
	return s, nil
}

func (s *netDevSampler) sample(dst []telemetry.Point) ([]telemetry.Point, error) {
	var err error
	if s.buf, err = s.read(s.env.procPath("net", "dev"), s.buf); err != nil {
		return dst, err
	}
	now := s.env.tl.now()
	ifaces, err := parseNetDev(s.buf)
	if err != nil {
		return dst, err
	}
	out := sink{pts: dst}
	out.start, out.end, out.emit = s.advance(s.env.tl, now)
	s.counts.begin(nil)
	n := len(netDevMetrics)
	rows := make([]uint64, len(ifaces)*n)
	for i, ifc := range ifaces {
		row := rows[i*n : (i+1)*n : (i+1)*n]
		for j, m := range netDevMetrics {
			row[j] = ifc.stats[m.field]
		}
		s.cols = s.counts.deltas(ifc.name, row, s.cols[:0])
		if len(s.cols) == 0 || !out.emit {
			continue
		}
		// operstate is read after the counters: an interface deleted in
		// between has none, and its points go out without the attribute
		// rather than with a made-up state.
		ifAttr := telemetry.Str("network.interface.name", ifc.name)
		state, stateOK := s.operstate(ifc.name)
		stateAttr := telemetry.Str("spikehunt.network.operstate", state)
		for _, c := range s.cols {
			m := &netDevMetrics[c.col]
			if stateOK {
				out.add(m.metric, m.unit, float64(c.delta), ifAttr, m.io, stateAttr)
			} else {
				out.add(m.metric, m.unit, float64(c.delta), ifAttr, m.io)
			}
		}
	}
	s.counts.commit()
	s.sweep() // closes the operstate files of interfaces that left
	return out.pts, nil
}

func (s *netDevSampler) operstate(iface string) (string, bool) {
	var err error
	s.ost, err = s.read(s.env.sysfs+"/class/net/"+iface+"/operstate", s.ost)
	if err != nil {
		return "", false
	}
	st := parseOperstate(s.ost)
	return st, st != ""
}

// parseOperstate returns the RFC 2863 state the kernel prints: unknown,
// notpresent, down, lowerlayerdown, testing, dormant or up.
func parseOperstate(b []byte) string {
	return string(bytes.TrimSpace(b))
}

type netDevLine struct {
	name  string
	stats [netDevColumns]uint64
}

// parseNetDev parses /proc/net/dev: two header lines, then
// "name: 8 receive columns 8 transmit columns". A name cannot contain ':'
// (dev_valid_name), and old kernels print no blank after the colon when
// the first number is wide, so lines are split at the colon.
func parseNetDev(b []byte) ([]netDevLine, error) {
	var out []netDevLine
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		if bytes.IndexByte(line, '|') >= 0 || len(trimBlank(line)) == 0 {
			continue // header
		}
		colon := bytes.IndexByte(line, ':')
		if colon < 0 {
			return nil, malformed("/proc/net/dev: no colon in %q", line)
		}
		l := netDevLine{name: string(trimBlank(line[:colon]))}
		// The name becomes a sysfs path element: refuse what the kernel
		// would (dev_valid_name) rather than read outside class/net.
		if l.name == "" || l.name == "." || l.name == ".." || bytes.ContainsAny(line[:colon], "/\x00") {
			return nil, malformed("/proc/net/dev: bad interface name in %q", line)
		}
		rest := line[colon+1:]
		for i := range l.stats {
			var f []byte
			f, rest = nextField(rest)
			v, err := parseUint(f)
			if err != nil {
				return nil, malformed("/proc/net/dev %s column %d: %v", l.name, i+1, err)
			}
			l.stats[i] = v
		}
		out = append(out, l)
	}
	return out, nil
}
