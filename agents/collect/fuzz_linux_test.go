package collect

import (
	"os"
	"strings"
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

func FuzzParseVmstat(f *testing.F) {
	addFileSeeds(f, "testdata/real/proc/vmstat")
	f.Add([]byte("nr_dirty 1\nnr_writeback 2\npgscan_direct_normal 5\nallocstall 3\npgmajfault 4\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseVmstat(b)
		if err != nil {
			return
		}
		if !v.has[vmScanDirect] || !v.has[vmMajorFault] {
			t.Fatalf("accepted a vmstat without pgscan_direct or pgmajfault: %+v", v)
		}
	})
}

func FuzzParseNetSNMP(f *testing.F) {
	addFileSeeds(f, "testdata/real/proc/net/snmp", "testdata/real/proc/net/netstat")
	f.Fuzz(func(t *testing.T, b []byte) {
		var r snmpReading
		if err := parseNetSNMP(b, &r); err != nil {
			return
		}
		for c := range snmpCounters {
			if r.values[c] != 0 && !r.has[c] {
				t.Fatalf("%s = %d without having been read", snmpFields[c].name, r.values[c])
			}
		}
	})
}

func FuzzParseCgroupCPUStat(f *testing.F) {
	addFileSeeds(f, "testdata/real/cgroup/cpu/"+fixtureCtrV1+"/cpu.stat", "testdata/real/cgroup/unified/"+fixtureCtrV2+"/cpu.stat")
	f.Add([]byte(v2CPUStatThrottled))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseCgroupCPUStat(b)
		if err != nil {
			return
		}
		if !c.has[cgUsageNs] && !c.has[cgPeriods] {
			t.Fatal("accepted a cpu.stat with neither usage nor periods")
		}
		for i := cgPSISomeUs; i < cgFields; i++ {
			if c.has[i] {
				t.Fatalf("cpu.stat set field %d, which is not its own", i)
			}
		}
	})
}

func FuzzParseCgroupUsage(f *testing.F) {
	addFileSeeds(f, "testdata/real/cgroup/cpuacct/"+fixtureCtrV1+"/cpuacct.usage")
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseCgroupUsage(b)
	})
}

func FuzzParseCgroupQuota(f *testing.F) {
	f.Add([]byte("20000\n"), []byte("100000\n"))
	f.Add([]byte("-1\n"), []byte("100000\n"))
	f.Fuzz(func(t *testing.T, quota, period []byte) {
		for _, parse := range []func() (uint64, uint64, bool, error){
			func() (uint64, uint64, bool, error) { return parseCgroupV1Quota(quota, period) },
			func() (uint64, uint64, bool, error) { return parseCgroupCPUMax(append(append(quota, ' '), period...)) },
		} {
			q, p, limited, err := parse()
			if err != nil {
				continue
			}
			if p == 0 || !limited && q != 0 {
				t.Fatalf("accepted quota %d period %d limited %v: a limit in CPUs must be q/p with p > 0", q, p, limited)
			}
		}
	})
}

func FuzzParseCgroupMemoryEvents(f *testing.F) {
	f.Add([]byte(v2MemoryEvents))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseCgroupMemoryEvents(b)
	})
}

// A cgroup directory's name becomes an attribute and, for the pod UID,
// a key for the API: what is accepted must be hex digits and dashes.
func FuzzCgroupDirNames(f *testing.F) {
	f.Add("kubepods-burstable-pod5f0c3a52_8a4e_4a8e_9b8f_0c6d2f1e7a10.slice")
	f.Add("pod" + fixturePodUID)
	f.Add("cri-containerd-" + fixtureCtrID + ".scope")
	f.Add("crio-conmon-abc.scope")
	f.Fuzz(func(t *testing.T, name string) {
		for _, parse := range []func(string) (string, bool){podUIDFromDir, containerIDFromDir} {
			id, ok := parse(name)
			if !ok {
				continue
			}
			if id == "" || strings.Trim(id, "0123456789abcdef-") != "" {
				t.Fatalf("%q gave id %q", name, id)
			}
		}
	})
}
