package collect

import (
	"os"
	"testing"
)

// The parsers read kernel text; these make sure no input panics them and
// that what they accept is self-consistent.

func addFileSeeds(f *testing.F, paths ...string) {
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

func FuzzParseInterrupts(f *testing.F) {
	addFileSeeds(f, "testdata/real/proc/interrupts", "testdata/netrx-storm/1/proc/interrupts")
	f.Add([]byte("CPU0 CPU1\n 11: 1 2 GICv3 27 Level arch_timer\nERR: 0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		snap, err := parseInterrupts(b)
		if err != nil {
			return
		}
		for _, l := range snap.irqs {
			if l.global && len(l.counts) != 1 || !l.global && len(l.counts) != len(snap.cpus) {
				t.Fatalf("IRQ %q: %d counts for %d CPUs (global %v)", l.irq, len(l.counts), len(snap.cpus), l.global)
			}
		}
	})
}

func FuzzParseNetDev(f *testing.F) {
	addFileSeeds(f, "testdata/real/proc/net/dev", "testdata/down-interface/1/proc/net/dev")
	f.Add([]byte("eth0:1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ifaces, err := parseNetDev(b)
		if err != nil {
			return
		}
		for _, l := range ifaces {
			if l.name == "" || l.name == "." || l.name == ".." {
				t.Fatalf("accepted interface name %q", l.name)
			}
			for _, c := range l.name {
				if c == '/' || c == 0 {
					t.Fatalf("accepted interface name %q, which would escape class/net", l.name)
				}
			}
		}
	})
}

func FuzzParseSoftirqs(f *testing.F) {
	addFileSeeds(f, "testdata/real/proc/softirqs", "testdata/netrx-storm/1/proc/softirqs")
	f.Fuzz(func(t *testing.T, b []byte) {
		snap, err := parseSoftirqs(b)
		if err != nil {
			return
		}
		for _, v := range snap.vectors {
			if len(v.perCPU) != len(snap.cpus) {
				t.Fatalf("vector %q: %d values for %d CPUs", v.name, len(v.perCPU), len(snap.cpus))
			}
		}
	})
}
