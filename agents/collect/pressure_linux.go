package collect

import (
	"bytes"
	"errors"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// /proc/pressure/{cpu,memory,io} (Linux 4.20+, CONFIG_PSI; with
// CONFIG_PSI_DEFAULT_DISABLED also psi=1 on the kernel command line,
// otherwise the directory does not exist): cumulative time, in
// microseconds, during which some or all non-idle tasks were stalled on
// the resource. "full" for cpu appeared in 5.13; irq (6.1+, with
// CONFIG_IRQ_TIME_ACCOUNTING) is read too when present, it has only "full".

func init() { registerSampler("pressure", fastCadence, newPressureSampler) }

// psiResources are the files read; the first psiRequired must exist.
var psiResources = []string{"cpu", "memory", "io", "irq"}

const psiRequired = 3

var (
	psiResourceAttrs = strAttrs("spikehunt.pressure.resource", psiResources...)
	psiSome          = telemetry.Str("spikehunt.pressure.kind", "some")
	psiFull          = telemetry.Str("spikehunt.pressure.kind", "full")
)

type pressureSampler struct {
	env       *env
	fileCache // files stay open between passes; Close closes them
	buf       []byte
	readings
	resetTally
	counts counterSet[psiKey]
	snaps  []psiReading
}

type psiKey struct {
	resource string
	full     bool
}

type psiReading struct {
	resource string
	index    int // into psiResources
	psi      psiTotals
}

func newPressureSampler(e *env) (sampler, error) {
	s := &pressureSampler{env: e}
	s.counts = newCounterSet[psiKey](&s.resetTally)
	return s, nil
}

func (s *pressureSampler) sample(dst []telemetry.Point) ([]telemetry.Point, error) {
	s.snaps = s.snaps[:0]
	for i, res := range psiResources {
		var err error
		s.buf, err = s.read(s.env.procPath("pressure", res), s.buf)
		if err != nil {
			if i >= psiRequired && errors.Is(err, ErrNotSupported) {
				continue
			}
			return dst, err
		}
		p, err := parsePressure(s.buf)
		if err != nil {
			return dst, err
		}
		s.snaps = append(s.snaps, psiReading{res, i, p})
	}
	now := s.env.tl.now()
	out := sink{pts: dst}
	out.start, out.end, out.emit = s.advance(s.env.tl, now)
	for _, r := range s.snaps {
		for _, k := range []struct {
			full    bool
			kind    telemetry.Attr
			has     bool
			totalUs uint64
		}{{false, psiSome, r.psi.hasSome, r.psi.someUs}, {true, psiFull, r.psi.hasFull, r.psi.fullUs}} {
			if !k.has {
				continue
			}
			if d, ok := s.counts.delta(psiKey{r.resource, k.full}, k.totalUs); ok {
				out.add("spikehunt.pressure.stall_time", "s", float64(d)/1e6,
					psiResourceAttrs[r.index], k.kind)
			}
		}
	}
	s.counts.commit()
	return out.pts, nil
}

// psiTotals are the total= fields of one pressure file, in microseconds.
type psiTotals struct {
	someUs, fullUs   uint64
	hasSome, hasFull bool
}

// parsePressure parses "some avg10=… avg60=… avg300=… total=N" and the
// same for "full". The averages are the kernel's own smoothing over its
// own windows; only the totals make deltas over our interval.
func parsePressure(b []byte) (psiTotals, error) {
	var p psiTotals
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		kind, rest := nextField(line)
		if len(kind) == 0 {
			continue
		}
		var total uint64
		var found bool
		for {
			var f []byte
			if f, rest = nextField(rest); len(f) == 0 {
				break
			}
			if v, ok := bytes.CutPrefix(f, []byte("total=")); ok {
				n, err := parseUint(v)
				if err != nil {
					return p, malformed("pressure %s total: %v", kind, err)
				}
				total, found = n, true
			}
		}
		if !found {
			return p, malformed("pressure line %q has no total=", line)
		}
		switch string(kind) {
		case "some":
			p.someUs, p.hasSome = total, true
		case "full":
			p.fullUs, p.hasFull = total, true
		default:
			return p, malformed("pressure: unknown kind %q", kind)
		}
	}
	if !p.hasSome && !p.hasFull {
		return p, malformed("pressure: no some or full line")
	}
	return p, nil
}
