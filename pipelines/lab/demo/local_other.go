//go:build !linux

package demo

import "time"

// The local capture runs on Linux only (findLocalHost says so); these keep
// the workload compiling elsewhere.

func threadID() uint32 { return 0 }

func blockThread(d time.Duration) { time.Sleep(d) }
