package collect

import (
	"errors"
	"fmt"
	"log/slog"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Defaults applied by Options.withDefaults.
const (
	DefaultProcFS     = "/proc"
	DefaultSysFS      = "/sys"
	DefaultDiskIgnore = `^(ram|loop|fd)\d+$`
	DefaultCgroupFS   = "/sys/fs/cgroup"

	// DefaultCgroupTop is how many of the busiest cgroups get series of
	// their own each interval, besides every throttled one.
	DefaultCgroupTop = 50
	// DefaultCgroupScanLimit bounds the workload cgroups a rescan keeps
	// (and the files held open for them).
	DefaultCgroupScanLimit = 2000
	// MaxCgroupTop and MaxCgroupScanLimit are Validate's upper bounds.
	MaxCgroupTop       = 1000
	MaxCgroupScanLimit = 20000
)

// knownSamplers names every sampler on every platform, so that one agent
// config can disable a Linux sampler on a Windows host (and the reverse)
// without failing validation there.
var knownSamplers = []string{
	"cgroup", "diskstats", "ethtool", "interrupts", "meminfo", "netdev",
	"netsnmp", "pdh", "pressure", "schedstat", "softirqs", "stat", "vmstat",
}

// Options configure a Collector. The zero value reads the host's /proc and
// /sys with every sampler enabled.
type Options struct {
	// ProcFS and SysFS are where procfs and sysfs are mounted. Point them
	// at the host's mounts from a container (/host/proc, /host/sys), or at
	// a captured fixture tree. Default /proc and /sys.
	ProcFS, SysFS string

	// Disabled names samplers to switch off (see Samplers). Unknown names
	// are an error, so that a typo does not leave a sampler running.
	Disabled []string

	// CgroupFS is where the cgroup file systems are mounted: a cgroup v2
	// hierarchy there, or v1 hierarchies in cpu/ and cpuacct/ below it
	// (a hybrid host's unified/ is not read). Default /sys/fs/cgroup.
	CgroupFS string

	// CgroupTop is how many cgroups, the busiest by CPU in the interval,
	// get series of their own; every cgroup throttled in the interval
	// does too, and the rest add up to one "other" series. Default
	// DefaultCgroupTop, at most MaxCgroupTop. Raising it multiplies the
	// agent's output: each cgroup is up to ten series.
	CgroupTop int

	// CgroupScanLimit bounds how many workload cgroups a rescan keeps;
	// those beyond are counted in spikehunt_collect_cgroups{state=
	// "not_scanned"}. Default DefaultCgroupScanLimit, at most
	// MaxCgroupScanLimit. Each kept cgroup holds two or three open files.
	CgroupScanLimit int

	// PodNamer names pods and containers found under kubepods; nil shows
	// them as "pod <uid>" and a 12-digit container id.
	PodNamer PodNamer

	// DiskIgnore is a regular expression over /proc/diskstats device
	// names; matching devices are not reported. Empty means
	// DefaultDiskIgnore; use "^$" to keep every device.
	DiskIgnore string

	// Clock measures intervals; nil means the system clock. Replace it
	// only in tests.
	Clock Clock

	// Logger receives "not supported" notices and sampler errors, once per
	// change of state rather than once per tick. nil means slog.Default().
	Logger *slog.Logger

	// ethtool supplies driver statistics by interface; nil means the
	// SIOCETHTOOL ioctl. Tests put a fixture here.
	ethtool ethtoolSource
}

// Validate checks the options as New would use them.
func (o Options) Validate() error {
	o = o.withDefaults()
	var errs []error
	for _, root := range []struct{ flag, path string }{{"ProcFS", o.ProcFS}, {"SysFS", o.SysFS}, {"CgroupFS", o.CgroupFS}} {
		if !path.IsAbs(root.path) {
			errs = append(errs, fmt.Errorf("%s %q: must be an absolute path", root.flag, root.path))
		}
	}
	for _, name := range o.Disabled {
		if !slices.Contains(knownSamplers, name) {
			errs = append(errs, fmt.Errorf("disabled sampler %q: unknown; known samplers are %s", name, strings.Join(knownSamplers, ", ")))
		}
	}
	if o.CgroupTop < 1 || o.CgroupTop > MaxCgroupTop {
		errs = append(errs, fmt.Errorf("CgroupTop %d: must be 1 to %d", o.CgroupTop, MaxCgroupTop))
	}
	if o.CgroupScanLimit < 1 || o.CgroupScanLimit > MaxCgroupScanLimit {
		errs = append(errs, fmt.Errorf("CgroupScanLimit %d: must be 1 to %d", o.CgroupScanLimit, MaxCgroupScanLimit))
	}
	if _, err := regexp.Compile(o.DiskIgnore); err != nil {
		errs = append(errs, fmt.Errorf("DiskIgnore: %w", err))
	}
	return errors.Join(errs...)
}

func (o Options) withDefaults() Options {
	if o.ProcFS == "" {
		o.ProcFS = DefaultProcFS
	}
	if o.SysFS == "" {
		o.SysFS = DefaultSysFS
	}
	if o.CgroupFS == "" {
		o.CgroupFS = DefaultCgroupFS
	}
	if o.CgroupTop == 0 {
		o.CgroupTop = DefaultCgroupTop
	}
	if o.CgroupScanLimit == 0 {
		o.CgroupScanLimit = DefaultCgroupScanLimit
	}
	if o.PodNamer == nil {
		o.PodNamer = uidPodNamer{}
	}
	if o.DiskIgnore == "" {
		o.DiskIgnore = DefaultDiskIgnore
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}
