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
)

// knownSamplers names every sampler on every platform, so that one agent
// config can disable a Linux sampler on a Windows host (and the reverse)
// without failing validation there.
var knownSamplers = []string{
	"diskstats", "ethtool", "interrupts", "meminfo", "netdev",
	"pdh", "pressure", "schedstat", "softirqs", "stat",
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
	for _, root := range []struct{ flag, path string }{{"ProcFS", o.ProcFS}, {"SysFS", o.SysFS}} {
		if !path.IsAbs(root.path) {
			errs = append(errs, fmt.Errorf("%s %q: must be an absolute path", root.flag, root.path))
		}
	}
	for _, name := range o.Disabled {
		if !slices.Contains(knownSamplers, name) {
			errs = append(errs, fmt.Errorf("disabled sampler %q: unknown; known samplers are %s", name, strings.Join(knownSamplers, ", ")))
		}
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
