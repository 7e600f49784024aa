package explain

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// WaitIO is a request's blocked time held against the block devices: how
// much of it some request was in flight on the device the thread waited
// for, issue → complete. What the devices do not cover lies above the
// block layer (a throttle, a lock, a queue, the page cache's writeback).
type WaitIO struct {
	Blocked time.Duration `json:"blocked_ns"`
	Device  time.Duration `json:"device_ns"`
	// Devices are the devices held against the wait: those whose
	// request completed just before a wakeup of the thread (the request
	// it waited for), or every device when no wakeup followed one.
	Devices []string `json:"devices"`
	// ByWakeup says the devices were found by the completions before
	// the thread's wakeups, not assumed.
	ByWakeup bool `json:"by_wakeup"`
	// Where is "device" (the device time is at least two thirds of the
	// wait), "above" (at most a third) or "both". The completion's way
	// back to the waiter (a softirq, a wakeup) counts as above: on a
	// fast device it is a tenth of each request's wait.
	Where    string `json:"where"`
	Sentence string `json:"sentence"`
}

// wakeCompletionWindow is how long before a wakeup a completion may be
// and still be the one that woke the thread: the completion path wakes
// the waiter itself, microseconds later, or its softirq does.
const wakeCompletionWindow = 2 * int64(time.Millisecond)

// waitIO holds a timeline's blocked segments against io; nil when the
// thread did not block, or blocked only in interruptible sleep with no
// block request completing before it woke (a sleep, a socket: not IO).
func waitIO(segs []Segment, io *BlockIO) *WaitIO {
	var (
		spans   [][2]int64
		blocked int64
		inD     bool
		woke    = map[string]int{}
		most    int
	)
	for i, s := range segs {
		if s.State != StateBlocked {
			continue
		}
		spans = append(spans, [2]int64{s.Start, s.End})
		blocked += s.End - s.Start
		if strings.HasPrefix(s.LeftAs, "D") {
			inD = true
		}
		// A wakeup ends the segment when the next one is runnable.
		if i+1 < len(segs) && segs[i+1].State == StateRunnable {
			if d, ok := io.LastCompletionBefore(s.End, wakeCompletionWindow); ok {
				woke[d]++
				most = max(most, woke[d])
			}
		}
	}
	// Another device's request may complete between the waited one's
	// and the wakeup: the devices held are those that came last before
	// more than half as many wakeups as the one that came last most.
	devs := map[string]bool{}
	for d, n := range woke {
		if 2*n > most {
			devs[d] = true
		}
	}
	if blocked <= 0 || !inD && len(devs) == 0 {
		return nil
	}
	w := &WaitIO{Blocked: time.Duration(blocked), ByWakeup: len(devs) > 0}
	var filter map[string]bool
	if w.ByWakeup {
		filter = devs
		for d := range devs {
			w.Devices = append(w.Devices, d)
		}
		sort.Strings(w.Devices)
	} else {
		for _, d := range io.Devices {
			w.Devices = append(w.Devices, d.Dev)
		}
	}
	w.Device = time.Duration(io.DeviceTimeOn(filter, spans))
	share := float64(w.Device) / float64(w.Blocked)
	which := "the devices were"
	if len(w.Devices) == 1 {
		which = "device " + w.Devices[0] + " was"
	}
	if !w.ByWakeup {
		which = "no block request completed before its wakeups; " + which
	}
	switch {
	case share >= 2.0/3:
		w.Where = "device"
		w.Sentence = fmt.Sprintf("device latency explains it: %s busy %s of the %s it was blocked", which, ms(w.Device), ms(w.Blocked))
	case share <= 1.0/3:
		w.Where = "above"
		w.Sentence = fmt.Sprintf("%s busy only %s of the %s it was blocked: the wait is above the block layer", which, ms(w.Device), ms(w.Blocked))
	default:
		w.Where = "both"
		w.Sentence = fmt.Sprintf("%s busy %s of the %s it was blocked: device latency explains that part, the other %s is above the block layer",
			which, ms(w.Device), ms(w.Blocked), ms(w.Blocked-w.Device))
	}
	return w
}
