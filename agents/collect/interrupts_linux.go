package collect

import (
	"bytes"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// /proc/interrupts: per IRQ, per CPU, with the device or queue the IRQ
// serves ("eth0-TxRx-3", "nvme0q1"). It runs at the slow cadence: the
// kernel formats the whole IRQ × CPU matrix on every read, which costs
// milliseconds on a host with a thousand MSI-X vectors and 128 CPUs.
//
// procfs parses this file too but joins the chip, hwirq and device columns
// into one string and indexes past the end of short lines such as ERR and
// MIS, so the parser is ours.

func init() { registerSampler("interrupts", slowCadence, newInterruptsSampler) }

type interruptsSampler struct {
	env       *env
	fileCache // files stay open between passes; Close closes them
	buf       []byte
	readings
	resetTally
	perCPU rowSet[irqKey]
	global counterSet[irqKey] // ERR, MIS
	cols   []colDelta
}

// irqKey includes the device so that an IRQ number handed to another
// device (a driver reload reallocating MSI-X vectors) starts a new series
// instead of continuing the old one.
type irqKey struct{ irq, device string }

func newInterruptsSampler(e *env) (sampler, error) {
	s := &interruptsSampler{env: e}
	s.perCPU = newRowSet[irqKey](&s.resetTally)
	s.global = newCounterSet[irqKey](&s.resetTally)
	return s, nil
}

// sample emits only the IRQ × CPU series that moved: with IRQ affinity
// most of the matrix stays at zero, and a thousand IRQs on 128 CPUs would
// otherwise be 128k zero points every tick. A missing series means zero.
func (s *interruptsSampler) sample(dst []telemetry.Point) ([]telemetry.Point, error) {
	var err error
	if s.buf, err = s.read(s.env.procPath("interrupts"), s.buf); err != nil {
		return dst, err
	}
	now := s.env.tl.now()
	snap, err := parseInterrupts(s.buf)
	if err != nil {
		return dst, err
	}
	out := sink{pts: dst}
	out.start, out.end, out.emit = s.advance(s.env.tl, now)
	s.perCPU.begin(snap.cpus)
	for _, l := range snap.irqs {
		k := irqKey{l.irq, l.device}
		if l.global {
			if d, ok := s.global.delta(k, l.counts[0]); ok && d > 0 {
				out.add("spikehunt.interrupts", "{interrupt}", float64(d),
					telemetry.Str("spikehunt.irq", l.irq), telemetry.Str("spikehunt.irq.device", l.device))
			}
			continue
		}
		s.cols = s.perCPU.deltas(k, l.counts, s.cols[:0])
		var irq, device telemetry.Attr // built on first use: most lines have no moved column
		for _, c := range s.cols {
			if c.delta == 0 || !out.emit {
				continue
			}
			if irq.Key == "" {
				irq, device = telemetry.Str("spikehunt.irq", l.irq), telemetry.Str("spikehunt.irq.device", l.device)
			}
			out.add("spikehunt.interrupts", "{interrupt}", float64(c.delta), cpuAttr(snap.cpus[c.col]), irq, device)
		}
	}
	s.perCPU.commit()
	s.global.commit()
	return out.pts, nil
}

type interruptsSnapshot struct {
	cpus []int // CPU number of each column, from the header (online CPUs only)
	irqs []irqLine
}

type irqLine struct {
	irq string // "24", "NMI", "LOC", "IPI0"
	// device is, for a numbered IRQ, the names of the handlers registered
	// on it ("eth0-TxRx-3"; "ehci_hcd:usb1, uhci_hcd:usb2" when shared);
	// for the others, the kernel's description ("Local timer interrupts").
	device string
	counts []uint64 // per column of cpus, or one system-wide count
	global bool     // ERR, MIS: a single count for the whole system
}

// parseInterrupts parses /proc/interrupts. Numbered lines read
//
//	" 38:  0  30516  PCI-MSIX-0000:00:03.0  1-edge  virtio2-input.0"
//
// that is: counts, the irq chip, the hardware IRQ and flow type (layout
// varies by kernel and architecture), then the handler names.
func parseInterrupts(b []byte) (interruptsSnapshot, error) {
	var snap interruptsSnapshot
	header, b := nextLine(b)
	cpus, err := parseCPUHeader(header)
	if err != nil {
		return snap, err
	}
	snap.cpus = cpus
	// One backing array for every line's counts: a big host has a
	// thousand lines of 128 counts. Each count takes at least two bytes of
	// text, which bounds the estimate on a malformed file.
	flat := make([]uint64, 0, min((bytes.Count(b, []byte{'\n'})+1)*len(cpus), len(b)/2+1))
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		name, rest := nextField(line)
		if len(name) == 0 {
			continue
		}
		if len(name) < 2 || name[len(name)-1] != ':' {
			return snap, malformed("/proc/interrupts: bad IRQ name %q", name)
		}
		if cap(flat)-len(flat) < len(cpus) {
			flat = make([]uint64, 0, 64*len(cpus))
		}
		l := irqLine{irq: string(name[:len(name)-1]), counts: flat[len(flat) : len(flat) : len(flat)+len(cpus)]}
		for len(l.counts) < len(cpus) {
			f, r := nextField(rest)
			if !isDigits(f) {
				break
			}
			n, err := parseUint(f)
			if err != nil {
				return snap, malformed("/proc/interrupts %s: %v", l.irq, err)
			}
			l.counts, rest = append(l.counts, n), r
		}
		flat = flat[:len(flat)+len(l.counts)]
		switch n := len(l.counts); {
		case n == len(cpus):
		case n == 1:
			l.global = true
		default:
			return snap, malformed("/proc/interrupts %s: %d counts for %d CPUs", l.irq, n, len(cpus))
		}
		if isDigits(name[:len(name)-1]) {
			l.device = string(irqDevice(rest))
		} else {
			l.device = string(trimBlank(rest))
		}
		snap.irqs = append(snap.irqs, l)
	}
	return snap, nil
}

// irqDevice returns the handler names at the end of a numbered line's
// description: it skips the chip name, then the tokens that describe the
// hardware IRQ ("5-edge", "27", "Level", "-virq").
func irqDevice(desc []byte) []byte {
	_, rest := nextField(desc) // chip
	for {
		f, r := nextField(rest)
		if len(f) == 0 || !isHWIRQToken(f) {
			return trimBlank(rest)
		}
		rest = r
	}
}

func isHWIRQToken(f []byte) bool {
	if bytes.Equal(f, []byte("Level")) || bytes.Equal(f, []byte("Edge")) {
		return true
	}
	if f[0] == '-' {
		return true
	}
	i := 0
	for i < len(f) && f[i] >= '0' && f[i] <= '9' {
		i++
	}
	return i > 0 && (i == len(f) || f[i] == '-')
}
