//go:build linux

package spool

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const childDirEnv = "SPIKEHUNT_SPOOL_TEST_APPENDER_DIR"

var killConfig = Config{SegmentBytes: 1 << 20, MaxBytes: 1 << 30, FsyncInterval: 100 * time.Millisecond}

// appendUntilKilled is the child's role: append payloadFor(seq) records as
// fast as it can and print each sequence number once Append returned it.
func appendUntilKilled(dir string) {
	cfg := killConfig
	cfg.Dir = dir
	s, _, err := Open(cfg, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for want := uint64(1); ; want++ {
		seq, err := s.Append(payloadFor(want))
		if err != nil || seq != want {
			fmt.Fprintf(os.Stderr, "Append = %d, %v; want %d\n", seq, err, want)
			os.Exit(3)
		}
		fmt.Fprintf(os.Stdout, "appended %d\n", seq)
	}
}

// TestKill9 runs an appender in a child process, kills it with SIGKILL in
// full flow and reopens its spool.
func TestKill9(t *testing.T) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		appendUntilKilled(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKill9$", "-test.count=1")
	cmd.Env = append(os.Environ(), childDirEnv+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	// Let it append for five fsync intervals (or 60,000 records, to bound the
	// disk used), then kill it in the middle of whatever it is doing.
	lines := bufio.NewScanner(out)
	var last uint64
	var first, killed time.Time
	for lines.Scan() {
		seq, ok := parseAppended(lines.Text())
		if !ok {
			continue
		}
		if seq != last+1 {
			t.Fatalf("the child reported %d after %d", seq, last)
		}
		last = seq
		if first.IsZero() {
			first = time.Now()
		}
		if killed.IsZero() && (time.Since(first) > 5*killConfig.FsyncInterval || last >= 60000) {
			killed = time.Now()
			if err := syscall.Kill(cmd.Process.Pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The lines the child wrote before it died are read to the end above.
	if err := cmd.Wait(); err == nil || cmd.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child ended with %v, not SIGKILL; stderr:\n%s", err, stderr.String())
	}
	if killed.IsZero() {
		t.Fatalf("the child stopped after %d records before it was killed; stderr:\n%s", last, stderr.String())
	}

	cfg := killConfig
	cfg.Dir = dir
	s, rec := mustOpen(t, cfg)
	if rec.Clean || rec.LossWindow != cfg.FsyncInterval {
		t.Errorf("Recovery after kill -9 = %+v, want unclean with a %v loss window", rec, cfg.FsyncInterval)
	}
	present := map[uint64]bool{}
	for _, seq := range readAll(t, s, 1) { // readAll fails on any payload that is not its record's
		present[seq] = true
	}
	rate := float64(last) / killed.Sub(first).Seconds()
	bound := uint64(rate * 2 * cfg.FsyncInterval.Seconds())
	var lost uint64
	for seq := uint64(1); seq <= last; seq++ {
		if !present[seq] {
			lost++
			if seq+bound <= last {
				t.Errorf("record %d is missing, more than 2×FsyncInterval (%d records) before the last one reported, %d", seq, bound, last)
			}
		}
	}
	t.Logf("kill -9 after %d reported records (%.0f records/s, %.1f MB): %d of them lost, bound %d (2×FsyncInterval at that rate); recovered %d records (the extra ones were appended but not yet reported), %d torn (%d bytes cut)",
		last, rate, float64(rec.Bytes)/1e6, lost, bound, rec.Records, rec.TornRecords, rec.TruncatedBytes)
	if lost > bound {
		t.Errorf("%d records lost, more than the %d appended in 2×FsyncInterval", lost, bound)
	}
	if rec.CorruptRecords > 0 {
		t.Errorf("a kill left %d corrupt records in the middle of a segment", rec.CorruptRecords)
	}
}

func parseAppended(line string) (uint64, bool) {
	v, ok := strings.CutPrefix(line, "appended ")
	if !ok {
		return 0, false
	}
	seq, err := strconv.ParseUint(v, 10, 64)
	return seq, err == nil
}
