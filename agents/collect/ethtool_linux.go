package collect

import (
	"bytes"
	"errors"
	"io"
	"os"
	"slices"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// NIC counters beyond /proc/net/dev, for interfaces backed by a device
// (physical or paravirtual NICs; veth, bridges, bonds and lo have no
// driver counters worth reading and on a Kubernetes node are most of the
// list): the drop counters of <sysfs>/class/net/<if>/statistics and the
// driver's own statistics through ETHTOOL_GSTATS, for pause frames (seed
// 001: flow control coupled a sender to a slow receiver) and drops.

func init() { registerSampler("ethtool", fastCadence, newEthtoolSampler) }

// sysfsDropCounters are the statistics files whose detail /proc/net/dev
// folds into its drop, fifo and frame columns. rx_nohandler (4.6+) counts
// packets that arrived on an interface with nobody to take them, such as
// an inactive bond slave.
var sysfsDropCounters = [...]string{
	"rx_missed_errors", "rx_fifo_errors", "rx_over_errors", "rx_crc_errors",
	"rx_frame_errors", "rx_length_errors", "rx_nohandler",
	"tx_fifo_errors", "tx_aborted_errors", "tx_carrier_errors",
}

type ethtoolSampler struct {
	env       *env
	fileCache // files stay open between passes; Close closes them
	src       ethtoolSource
	buf       []byte
	readings
	resetTally
	counts counterSet[ifaceCounter]
	ifaces map[string]*nicState
}

type ifaceCounter struct{ iface, counter string }

// nicState caches what is known about one interface.
type nicState struct {
	hasDevice bool
	missing   [len(sysfsDropCounters)]bool // statistics files this kernel lacks
	names     []string                     // the slice classified into picks
	picks     []ethtoolPick
	told      bool // "no pause counters" was logged
}

func newEthtoolSampler(e *env) (sampler, error) {
	src := e.ethtool
	if src == nil {
		src = newIoctlEthtool()
	}
	s := &ethtoolSampler{env: e, src: src, ifaces: map[string]*nicState{}}
	s.counts = newCounterSet[ifaceCounter](&s.resetTally)
	return s, nil
}

func (s *ethtoolSampler) Close() error {
	s.fileCache.Close()
	if c, ok := s.src.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

type nicReading struct {
	iface   string
	counter string
	value   uint64
	pick    *ethtoolPick // nil for a sysfs counter
}

func (s *ethtoolSampler) sample(dst []telemetry.Point) ([]telemetry.Point, error) {
	dir := s.env.sysPath("class", "net")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return dst, readError(dir, err)
	}
	var got []nicReading
	seen := make(map[string]bool, len(entries))
	for _, ent := range entries {
		name := ent.Name()
		seen[name] = true
		st := s.ifaces[name]
		if st == nil {
			_, err := os.Stat(s.env.sysPath("class", "net", name, "device"))
			st = &nicState{hasDevice: err == nil}
			s.ifaces[name] = st
		}
		if !st.hasDevice {
			continue
		}
		for i, c := range sysfsDropCounters {
			if st.missing[i] {
				continue
			}
			if s.buf, err = s.read(s.env.sysPath("class", "net", name, "statistics", c), s.buf); err != nil {
				// The kernel predates this counter, or the interface just
				// left (and its state goes with it).
				st.missing[i] = errors.Is(err, ErrNotSupported)
				continue
			}
			if v, err := parseUint(bytes.TrimSpace(s.buf)); err == nil {
				got = append(got, nicReading{iface: name, counter: c, value: v})
			}
		}
		got = s.driverStats(name, st, got)
	}
	now := s.env.tl.now()
	for name := range s.ifaces {
		if !seen[name] {
			delete(s.ifaces, name) // gone; a new interface of that name is checked afresh
		}
	}
	out := sink{pts: dst}
	out.start, out.end, out.emit = s.advance(s.env.tl, now)
	for _, r := range got {
		d, ok := s.counts.delta(ifaceCounter{r.iface, r.counter}, r.value)
		switch {
		case !ok:
		case r.pick != nil && r.pick.kind == ethtoolPause:
			out.add("spikehunt.network.pause_frames", "{frame}", float64(d),
				telemetry.Str("network.interface.name", r.iface), telemetry.Str("network.io.direction", r.pick.direction),
				telemetry.Str("spikehunt.counter", r.counter))
		default:
			out.add("spikehunt.network.driver_drops", "{packet}", float64(d),
				telemetry.Str("network.interface.name", r.iface), telemetry.Str("spikehunt.counter", r.counter))
		}
	}
	s.counts.commit()
	s.sweep()
	return out.pts, nil
}

// driverStats appends the pause and drop counters of the driver's own
// statistics. A driver without statistics, or without pause counters, is
// logged once per interface; neither is an error.
func (s *ethtoolSampler) driverStats(iface string, st *nicState, got []nicReading) []nicReading {
	names, values, err := s.src.Stats(iface)
	if err != nil && !errors.Is(err, ErrNotSupported) {
		s.env.log.Debug("driver statistics unavailable", "sampler", "ethtool", "interface", iface, "err", err)
		return got // transient: the interface is going away, or the socket failed
	}
	if err != nil || len(values) != len(names) {
		if !st.told {
			st.told = true
			s.env.log.Info("driver statistics not supported; pause frames not reported for this interface",
				"sampler", "ethtool", "interface", iface, "reason", errString(err))
		}
		return got
	}
	if len(names) != len(st.names) || (len(names) > 0 && &names[0] != &st.names[0]) {
		st.names = names
		st.picks = classifyEthtool(names, func(n string) bool { return slices.Contains(sysfsDropCounters[:], n) })
		if !st.told && !slices.ContainsFunc(st.picks, func(p ethtoolPick) bool { return p.kind == ethtoolPause }) {
			st.told = true
			s.env.log.Info("driver exposes no pause-frame counters; pause frames not reported for this interface",
				"sampler", "ethtool", "interface", iface)
		}
	}
	for i := range st.picks {
		p := &st.picks[i]
		got = append(got, nicReading{iface: iface, counter: p.name, value: values[p.index], pick: p})
	}
	return got
}

func errString(err error) string {
	if err == nil {
		return "counter names and values differ in length"
	}
	if errors.Is(err, ErrNotSupported) {
		return "not supported by the driver"
	}
	return err.Error()
}
