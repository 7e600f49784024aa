package collect

import (
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// /proc/diskstats: per block device, operations, time spent and I/Os in
// flight. Devices matching Options.DiskIgnore (loop, ram, floppy by
// default) are skipped; partitions are kept, since a hot partition is
// worth seeing next to its disk.

func init() { registerSampler("diskstats", fastCadence, newDiskstatsSampler) }

type diskstatsSampler struct {
	env       *env
	fileCache // files stay open between passes; Close closes them
	buf       []byte
	readings
	resetTally
	counts rowSet[string] // by device; columns are diskMetrics
	cols   []colDelta
}

// Fields of a diskstats line after major, minor and name (Documentation/
// admin-guide/iostats.rst), 0-based. Times are milliseconds.
const (
	dsReads, dsReadsMerged, dsSectorsRead, dsReadMs       = 0, 1, 2, 3
	dsWrites, dsWritesMerged, dsSectorsWritten, dsWriteMs = 4, 5, 6, 7
	dsInFlight, dsIOMs                                    = 8, 9
	diskColumns                                           = 11  // up to weighted ms; 4.18 adds discards, 5.5 flushes
	sectorBytes                                           = 512 // diskstats counts 512-byte sectors whatever the device's block size
)

var diskMetrics = []struct {
	field        int
	metric, unit string
	direction    telemetry.Attr // zero when the metric has no direction
	scale        float64        // multiplies the raw delta
}{
	{dsReads, "system.disk.operations", "{operation}", diskRead, 1},
	{dsWrites, "system.disk.operations", "{operation}", diskWrite, 1},
	{dsReadMs, "system.disk.operation_time", "s", diskRead, 1e-3},
	{dsWriteMs, "system.disk.operation_time", "s", diskWrite, 1e-3},
	{dsIOMs, "system.disk.io_time", "s", telemetry.Attr{}, 1e-3},
	{dsSectorsRead, "system.disk.io", "By", diskRead, sectorBytes},
	{dsSectorsWritten, "system.disk.io", "By", diskWrite, sectorBytes},
	{dsReadsMerged, "system.disk.merged", "{operation}", diskRead, 1},
	{dsWritesMerged, "system.disk.merged", "{operation}", diskWrite, 1},
}

var (
	diskRead  = telemetry.Str("disk.io.direction", "read")
	diskWrite = telemetry.Str("disk.io.direction", "write")
)

func newDiskstatsSampler(e *env) (sampler, error) {
	s := &diskstatsSampler{env: e}
	s.counts = newRowSet[string](&s.resetTally)
	return s, nil
}

// sample emits deltas for the counters and the in-flight count as a gauge:
// it is a level, not a counter, so its point has Start == End == the
// reading's wall time.
func (s *diskstatsSampler) sample(dst []telemetry.Point) ([]telemetry.Point, error) {
	var err error
	if s.buf, err = s.read(s.env.procPath("diskstats"), s.buf); err != nil {
		return dst, err
	}
	now := s.env.tl.now()
	disks, err := parseDiskstats(s.buf)
	if err != nil {
		return dst, err
	}
	out := sink{pts: dst}
	out.start, out.end, out.emit = s.advance(s.env.tl, now)
	at := s.env.tl.wall(now)
	s.counts.begin(nil)
	n := len(diskMetrics)
	rows := make([]uint64, len(disks)*n)
	for i, d := range disks {
		if s.env.diskIgnore.MatchString(d.name) {
			continue
		}
		row := rows[i*n : (i+1)*n : (i+1)*n]
		for j, m := range diskMetrics {
			row[j] = d.stats[m.field]
		}
		s.cols = s.counts.deltas(d.name, row, s.cols[:0])
		dev := telemetry.Str("system.device", d.name)
		for _, c := range s.cols {
			m := &diskMetrics[c.col]
			if m.direction.Key == "" {
				out.add(m.metric, m.unit, float64(c.delta)*m.scale, dev)
			} else {
				out.add(m.metric, m.unit, float64(c.delta)*m.scale, dev, m.direction)
			}
		}
		out.gauge(at, "spikehunt.disk.in_flight", "{operation}", float64(d.stats[dsInFlight]), dev)
	}
	s.counts.commit()
	return out.pts, nil
}

type diskLine struct {
	name  string
	stats [diskColumns]uint64
}

// parseDiskstats parses /proc/diskstats: "major minor name" then at least
// eleven counters; later kernels append more, which are ignored.
func parseDiskstats(b []byte) ([]diskLine, error) {
	var out []diskLine
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		major, rest := nextField(line)
		if len(major) == 0 {
			continue
		}
		minor, rest := nextField(rest)
		name, rest := nextField(rest)
		if !isDigits(major) || !isDigits(minor) || len(name) == 0 {
			return nil, malformed("/proc/diskstats: bad device in %q", line)
		}
		l := diskLine{name: string(name)}
		for i := range l.stats {
			var f []byte
			f, rest = nextField(rest)
			v, err := parseUint(f)
			if err != nil {
				return nil, malformed("/proc/diskstats %s field %d: %v", l.name, i+1, err)
			}
			l.stats[i] = v
		}
		out = append(out, l)
	}
	return out, nil
}
