package capture

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

// govern applies CPU affinity, nice and the IO class to every thread of
// pid. On Linux all three are per thread, and a thread inherits them from
// the one that creates it, so a recorder governed right after it starts
// (perf and bpftrace start single-threaded) stays governed.
func govern(pid int, cpus []int, nice int, ioClass string) (record.Governance, error) {
	g := record.Governance{CPUs: cpus, Nice: nice, IOClass: ioClass}
	tids, err := threads(pid)
	if err != nil {
		return g, err
	}
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	for _, tid := range tids {
		if len(cpus) > 0 {
			if err := unix.SchedSetaffinity(tid, &set); err != nil {
				return g, fmt.Errorf("pin thread %d to CPUs %v: %w", tid, cpus, err)
			}
		}
		if nice != 0 {
			if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
				return g, fmt.Errorf("nice thread %d: %w", tid, err)
			}
		}
		if ioClass != "" {
			if err := ioprioSet(tid, ioClass); err != nil {
				return g, fmt.Errorf("ionice thread %d: %w", tid, err)
			}
		}
	}
	return g, nil
}

// startPinned starts cmd with its first thread already on cpus: a child
// inherits the affinity of the thread that forks it. Pinning only after
// the start is not enough for perf: it saves its affinity as it starts,
// moves itself across the CPUs to enable its events on each, and then
// restores what it saved, which may be the mask it had before the pin.
// The forking thread gets its own mask back before it is released.
func startPinned(cmd *exec.Cmd, cpus []int) error {
	if len(cpus) == 0 {
		return cmd.Start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var saved, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &saved); err != nil {
		return fmt.Errorf("read this thread's CPUs: %w", err)
	}
	for _, c := range cpus {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin to CPUs %v: %w", cpus, err)
	}
	err := cmd.Start()
	// Widening one's own mask back is always allowed; were it refused,
	// the thread would only run on fewer CPUs.
	_ = unix.SchedSetaffinity(0, &saved)
	return err
}

func threads(pid int) ([]int, error) {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out, nil
}

// ioprio_set(2): the class sits in the top bits of the priority word.
const (
	ioprioWhoProcess = 1
	ioprioClassShift = 13
	ioprioClassBE    = 2
	ioprioClassIdle  = 3
)

func ioprioSet(tid int, class string) error {
	c := ioprioClassBE
	data := 7 // lowest best-effort priority
	if class == "idle" {
		c, data = ioprioClassIdle, 0
	}
	_, _, e := unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoProcess, uintptr(tid), uintptr(c<<ioprioClassShift|data))
	if e != 0 {
		return e
	}
	return nil
}
