// Package collect holds the kernel-counter samplers of spikehunt-agent:
// one per kernel source, each turning cumulative counters into deltas over
// the interval it actually measured (docs/design.md §3).
//
// # Lifecycle
//
// New validates Options and builds the enabled samplers; it reads nothing.
// The first Sample (and SampleSlow) is every sampler's baseline: it emits
// only levels (gauges), no deltas. Each later call emits, per series, the
// change since the previous successful reading. Run drives both on tickers
// until its context is done, on the caller's goroutine; the package starts
// no goroutine of its own.
//
// Between passes the samplers keep their files open and re-read them from
// offset 0, which procfs and sysfs regenerate (opening a sysfs path costs
// ten times reading it). The cgroup sampler holds each cgroup's open files
// itself, so that a pass over hundreds of cgroups does not look their long
// paths up; the cache marks a file it closed, and the next read opens the
// path again. What is read once a walk (a cgroup's quota, v1's memory
// limit) is opened, read with one pread and closed: held open, it would
// cost a descriptor and a kernel buffer per cgroup for a read every 10 s.
// Close releases those descriptors, the ethtool socket (Linux) and the PDH
// query (Windows); a Collector that is dropped without Close leaks them.
//
// Sample and SampleSlow may be called concurrently with each other; calls
// of the same one are serialized. The returned slice belongs to the caller.
//
// Options.PodNamer names the cgroups of Kubernetes pods. The agent passes
// agents/podwatch's Watcher, whose goroutine the agent starts and stops
// (cmd's podnames.go); the collector only calls its lookups, from the
// slow rescan, and neither starts nor closes it. Without one, pods are
// shown as "pod <uid>".
//
// # The measured-interval rule
//
// Every sampler keeps its previous reading and the Clock time it was taken
// at, right after the read. A Point's Start and End are the wall-clock
// times of the two readings, derived from the monotonic clock through one
// anchor taken in New, so End − Start is the true interval even when a
// tick ran 2–3× late under load (the down interface (docs/field-stories.md)) or the wall clock stepped:
// Value / (End − Start) is always the true rate. A failed read leaves the
// previous reading in place, so the next success covers the whole gap.
// Deltas are never negative: a counter that goes down (reset, driver
// reload, 32-bit wrap) emits nothing for that series once and is counted
// in spikehunt_collect_counter_resets_total. A CPU or device that appears
// starts a new series with a baseline; one that disappears is forgotten.
// Levels (I/Os in flight, slab bytes) are gauges: Start == End == the
// reading's wall time, which is how the exporter tells them apart.
//
// # Units
//
// Times are seconds ("s"): /proc/stat ticks are USER_HZ (100/s), PSI
// totals microseconds, schedstat run delay nanoseconds, diskstats
// milliseconds — all converted. Bytes are "By" (diskstats sectors are 512
// bytes whatever the device; meminfo's "kB" is KiB). Counts use UCUM
// annotations: {packet}, {interrupt}, {softirq}, {switch}, {operation},
// {page}, {stall}, {fault}, {segment}, {connection}, {datagram},
// {period}, {event}; a cgroup's CPU limit is a gauge in {cpu} (quota ÷
// period). vmstat's page levels are bytes (nr_dirty × the base page size).
//
// # Sources and minimum kernels
//
//	sampler     source                                   minimum kernel, and why
//	stat        /proc/stat                               2.6.11 for steal; irq/softirq split since 2.6.0
//	softirqs    /proc/softirqs                           2.6.31 (file added)
//	interrupts  /proc/interrupts (slow cadence)          any; device names as registered by drivers
//	netdev      /proc/net/dev + class/net/*/operstate    2.6.17 for RFC 2863 operstate
//	ethtool     class/net/*/statistics + SIOCETHTOOL     2.6 for GSTATS; rx_nohandler 4.6; counters are driver-specific
//	diskstats   /proc/diskstats                          2.6; 4.18 and 5.5 append fields, ignored
//	schedstat   /proc/schedstat                          CONFIG_SCHEDSTATS, format version 15+
//	pressure    /proc/pressure/{cpu,memory,io[,irq]}     4.20 (PSI added), CONFIG_PSI, psi=1 if default-disabled; cpu "full" 5.13; irq 6.1
//	meminfo     /proc/meminfo                            2.6.19 for SReclaimable/SUnreclaim
//	vmstat      /proc/vmstat                             2.6; 4.8 renamed the reclaim counters (both spellings read); THP ones need CONFIG_TRANSPARENT_HUGEPAGE
//	netsnmp     /proc/net/snmp + /proc/net/netstat       2.6 for the TCP MIB; Udp InCsumErrors 3.10; a counter the kernel lacks is not reported
//	cgroup      <cgroupfs>/cpu,cpuacct (v1) or v2 tree   v1 CFS bandwidth 3.2; v2 4.5, its cpu controller 4.15, cpu.pressure 4.20 (PSI)
//	pdh         PDH "Processor Information" (Windows)    Windows 7 / Server 2008 R2
//
// A source the kernel lacks is not an error: the sampler logs "not
// supported" once at Info, sets spikehunt_collect_not_supported{sampler}
// to 1, and the others keep running. It checks again each pass, quietly.
//
// # procfs
//
// The parsers are this package's own rather than prometheus/procfs: the
// sampler contract is a pure parseX([]byte) that tests and fuzzing can
// drive, while procfs parses only from a path and keeps its parsers
// unexported; it also lacks what spikehunt needs in places (per-IRQ device
// names, softirq vectors newer than it knows). Tests check the parsers
// against procfs on this machine's captured files.
//
// # Cgroups: workloads, names, cardinality
//
// The cgroup sampler reports workloads, not every cgroup: on Kubernetes
// the pods and their containers under kubepods (every QoS class, the
// cgroupfs and the systemd driver), elsewhere systemd's slices and the
// services, scopes and slices in them (cgroup_tree_linux.go). Each point
// carries spikehunt.cgroup, the workload's name: "namespace/pod" and
// "namespace/pod/container" from Options.PodNamer, "pod <uid>" and a
// 12-digit container id without one, the unit's path
// ("system.slice/backup.service") elsewhere. The pipeline files it in the
// counters table's device column.
//
// Each interval reports every cgroup throttled in it and the CgroupTop
// (default 50) busiest by CPU; the CPU of the rest adds up to
// spikehunt.cgroup="other", summed over the cgroups that no other
// workload contains (a container is inside its pod), and
// spikehunt_collect_cgroups{state} counts them. The tree is walked on
// SampleSlow, never on the 1 s pass: a cgroup created between walks is
// seen from the next one, with a baseline. A walk keeps at most
// CgroupScanLimit workloads and reads directories in batches, so a
// runaway tree costs bounded memory; what it left is counted as
// not_scanned.
//
// A reported cgroup's series are emitted every interval, a zero delta
// included, never only when they changed: the pipeline takes medians and
// rates over intervals (the throttling baseline of pipelines/cli/query is
// a median of each interval's throttled share), and a left-out interval
// would be no data there rather than a zero. Nor does a pass read the
// usage first and the throttling only of the busiest: a cgroup throttled
// in one 100 ms period may have used no more than that period's quota in
// the whole second, far from the busiest, and every throttled cgroup must
// be reported.
//
// Why one package: the samplers are many small rooms already, one file
// per kernel source, registering themselves in one table that the agent's
// flags switch. They share the measured-interval rule, the counter reset
// handling and the fixture roots; a package per sampler would export
// those for one another.
//
// # Containers
//
// Point ProcFS, SysFS and CgroupFS at the host's mounts. The ethtool ioctl
// and /proc/net/snmp and /proc/net/netstat describe the network namespace
// the agent runs in, so a DaemonSet needs hostNetwork: true to see the
// host's NICs and TCP stack.
package collect
