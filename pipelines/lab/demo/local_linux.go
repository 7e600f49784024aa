package demo

import (
	"syscall"
	"time"
)

// threadID is the calling thread's id, as perf's sched_switch names it.
func threadID() uint32 { return uint32(syscall.Gettid()) }

// blockThread sleeps in the kernel for d on the calling thread, which the
// caller has locked: the trace shows that thread off-CPU for the whole
// time, where time.Sleep would park only the goroutine.
func blockThread(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
