package ingest

import (
	"os"
	"strconv"
	"sync/atomic"
)

// A crash point for the crash test: with SPIKEHUNT_TEST_KILL_AFTER_INSERTS=n
// in its environment the process SIGKILLs itself right after its n-th
// insert, before the offsets are committed, the one moment the handshake
// exists for. Random kills rarely land there; the test needs some that do,
// or its control run (no deduplication) could pass by luck.
var killAfter = func() int64 {
	n, _ := strconv.ParseInt(os.Getenv("SPIKEHUNT_TEST_KILL_AFTER_INSERTS"), 10, 64)
	return n
}()

var inserts atomic.Int64

func (in *Ingester) afterInsert() {
	if killAfter > 0 && inserts.Add(1) == killAfter {
		if p, err := os.FindProcess(os.Getpid()); err == nil {
			p.Kill() // SIGKILL: no deferred function runs
		}
	}
}
