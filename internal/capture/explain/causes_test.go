package explain

import (
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

// causeFixture is one of testdata/causes: a real capture's perf script
// text cut to a request, with what the recorder read of the host's
// cgroups and the verdict the node gave (testdata/causes/README.md).
type causeFixture struct {
	Request record.RequestRecord `json:"request"`
	Clock   record.Clock         `json:"clock"`
	Cgroups *Cgroups             `json:"cgroups"`
	Verdict string               `json:"verdict"`
	trace   *Trace
}

// loaded keeps the fixtures parsed: the faults' trace is some 9 MB of
// text. Tests read them, never change them.
var loaded sync.Map

func loadCause(t *testing.T, name string) causeFixture {
	t.Helper()
	if c, ok := loaded.Load(name); ok {
		return c.(causeFixture)
	}
	var c causeFixture
	b, err := os.ReadFile(filepath.Join("testdata", "causes", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join("testdata", "causes", name+".perf.txt.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if c.trace, err = Parse(z, Limits{}); err != nil {
		t.Fatal(err)
	}
	c.trace.SortEvents()
	loaded.Store(name, c)
	return c
}

// host is the fixture's cgroups as a recorder's Host.
func (c causeFixture) host() *Host {
	if c.Cgroups == nil {
		return &Host{Task: func(int32) (TaskCgroups, bool) { return TaskCgroups{}, false }}
	}
	return &Host{Quotas: c.Cgroups.Quotas, Task: func(tid int32) (TaskCgroups, bool) {
		for _, tc := range c.Cgroups.Tasks {
			if tc.TID == tid {
				return tc, true
			}
		}
		return TaskCgroups{}, false
	}}
}

// Each real capture gives, from its cut trace and cgroups, the verdict
// the node gave, which names its cause.
func TestVerdictsOfTheEverydayCausesFromRealCaptures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		wants []string
	}{
		{"verdict-throttled", []string{"runnable ", " while its cgroup /spikehunt-test-throttled-", " was CPU-throttled (quota 0.1 CPU: 10 ms per 100 ms; throttled ", " ms, meanwhile)"}},
		{"verdict-neighbour", []string{"runnable ", " behind noisyhog[", "] of /spikehunt-test-neighbour-", " on CPU 1;"}},
		{"verdict-reclaim", []string{"in direct reclaim of its memory cgroup /spikehunt-test-reclaim-", " (limit 32 MiB) for ", "shrink_folio_list"}},
		{"verdict-faults", []string{"waited ", " on major page faults (", " faults)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := loadCause(t, tc.name)
			v := c.trace.ExplainRequestOn(c.Request, c.Clock, c.host())
			if v.Verdict != c.Verdict {
				t.Errorf("verdict\n  %s\nthe node said\n  %s", v.Verdict, c.Verdict)
			}
			at := 0
			for _, w := range tc.wants {
				i := strings.Index(v.Verdict[at:], w)
				if i < 0 {
					t.Fatalf("verdict %q lacks %q after byte %d", v.Verdict, w, at)
				}
				at += i + len(w)
			}
		})
	}
}

// The stacks alone say reclaim and major faults: a capture without the
// host's cgroups (an artifact recorded before they were read, another
// recorder) still names them, without the cgroup; and names no cgroup
// nor throttling where only the host could.
func TestVerdictsWithoutTheHostKeepTheTraceAlone(t *testing.T) {
	c := loadCause(t, "verdict-reclaim")
	v := c.trace.ExplainRequest(c.Request, c.Clock)
	if !strings.HasPrefix(v.Verdict, "in direct reclaim of its memory cgroup for ") || v.Reclaim == nil || v.Reclaim.Blocked == 0 {
		t.Errorf("without the host: %q, reclaim %+v", v.Verdict, v.Reclaim)
	}
	c = loadCause(t, "verdict-faults")
	v = c.trace.ExplainRequest(c.Request, c.Clock)
	if v.MajorFaults == nil || v.MajorFaults.Waits < 1000 || !strings.HasPrefix(v.Verdict, "waited ") {
		t.Errorf("without the host: %q, faults %+v", v.Verdict, v.MajorFaults)
	}
	c = loadCause(t, "verdict-throttled")
	v = c.trace.ExplainRequest(c.Request, c.Clock)
	if v.Throttled != nil || v.Cgroup != "" || strings.Contains(v.Verdict, "throttled") || !strings.HasPrefix(v.Verdict, "runnable ") {
		t.Errorf("without the host: %q", v.Verdict)
	}
	c = loadCause(t, "verdict-neighbour")
	v = c.trace.ExplainRequest(c.Request, c.Clock)
	if strings.Contains(v.Verdict, " of /") || !strings.Contains(v.Verdict, "behind noisyhog[") {
		t.Errorf("without the host: %q", v.Verdict)
	}
}

// An explain.json written before the causes were read decodes, with none.
func TestAnOldAnalysisDecodes(t *testing.T) {
	old := `{"version":1,"requests":[{"request":{"start":"2026-01-02T03:04:05Z","end":"2026-01-02T03:04:06Z","latency_ms":1000,"service":"web","endpoint":"/","weight":1},
		"thread":"web[1]","on_cpu_ns":1,"runnable_ns":2,"blocked_ns":3,"unknown_ns":0,"runnable_behind":[{"who":"hog[2]","ns":2}],"runnable_cpu":1,"segments":[],"verdict":"runnable 2 ns"}],
		"events":1,"samples":0,"lost_events":0,"top_stacks":[],"cpus":[],"findings":{"verdict":"x","hottest_cpu":-1,"hottest_cpu_busy":0,"softirq_share":0}}`
	var a Analysis
	if err := json.Unmarshal([]byte(old), &a); err != nil {
		t.Fatal(err)
	}
	v := a.Requests[0]
	if v.Throttled != nil || v.Reclaim != nil || v.MajorFaults != nil || v.Cgroup != "" || v.RunnableBehind[0].Cgroup != "" || a.Cgroups != nil {
		t.Errorf("%+v", v)
	}
}

func TestThrottlingTakesTheSamplesThatBracketTheRequest(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	q := CPUQuota{Cgroup: "/kubepods/pod1", QuotaUS: 50000, PeriodUS: 100000, Samples: []CPUStat{
		{At: t0, Throttled: 1, ThrottledNS: 10e6},
		{At: t0.Add(time.Second), Throttled: 1, ThrottledNS: 10e6},
		{At: t0.Add(2 * time.Second), Throttled: 5, ThrottledNS: 390e6},
		{At: t0.Add(3 * time.Second), Throttled: 9, ThrottledNS: 700e6},
	}}
	h := &Host{Quotas: []CPUQuota{q}}
	// The child's own cgroup has no quota: its parent's throttles it.
	th := h.throttling("/kubepods/pod1/ctr", t0.Add(1100*time.Millisecond), t0.Add(1900*time.Millisecond))
	if th == nil || th.Times != 4 || th.ThrottledNS != 380e6 || th.Cgroup != "/kubepods/pod1" {
		t.Fatalf("%+v", th)
	}
	if got := th.clause(); got != "while its cgroup /kubepods/pod1 was CPU-throttled (quota 0.5 CPU: 50 ms per 100 ms; throttled 4 times, 380 ms, meanwhile)" {
		t.Errorf("clause %q", got)
	}
	// Before any growth, or past the last sample: none.
	if th := h.throttling("/kubepods/pod1", t0.Add(100*time.Millisecond), t0.Add(900*time.Millisecond)); th != nil {
		t.Errorf("no growth: %+v", th)
	}
	if th := h.throttling("/kubepods/pod1", t0.Add(2500*time.Millisecond), t0.Add(4*time.Second)); th != nil {
		t.Errorf("unbracketed: %+v", th)
	}
	if th := h.throttling("/other", t0.Add(1100*time.Millisecond), t0.Add(1900*time.Millisecond)); th != nil {
		t.Errorf("another cgroup: %+v", th)
	}
}

// Throttled for most of its runnable time, the quota is the story; for a
// quarter to a half, the quota and who held the CPU; for less, who held it.
func TestThrottlingAndWhoHeldTheCPU(t *testing.T) {
	v := RequestVerdict{Thread: "web[7]", OnCPU: 50 * time.Millisecond, Runnable: 400 * time.Millisecond, RunnableCPU: 0, Cgroup: "/pod1",
		RunnableBehind: []ShareView{{Who: "ld[9]", NS: 300 * time.Millisecond, Cgroup: "/"}},
		Throttled:      &Throttling{Cgroup: "/pod1", QuotaUS: 10000, PeriodUS: 100000, Times: 4, ThrottledNS: 300 * time.Millisecond}}
	for _, tc := range []struct {
		throttled time.Duration
		want      string
	}{
		{300 * time.Millisecond, "runnable 400 ms while its cgroup /pod1 was CPU-throttled (quota 0.1 CPU: 10 ms per 100 ms; throttled 4 times, 300 ms, meanwhile); 450 ms"},
		{150 * time.Millisecond, "runnable 400 ms while its cgroup /pod1 was CPU-throttled (quota 0.1 CPU: 10 ms per 100 ms; throttled 4 times, 150 ms, meanwhile) and behind ld[9] of the root cgroup on CPU 0; 450 ms"},
		{50 * time.Millisecond, "runnable 400 ms behind ld[9] of the root cgroup on CPU 0; 450 ms"},
	} {
		v.Throttled.ThrottledNS = tc.throttled
		if got := v.sentence(); !strings.HasPrefix(got, tc.want) {
			t.Errorf("throttled %v:\n  %s\nwant\n  %s…", tc.throttled, got, tc.want)
		}
	}
}

// A thread blocked on a futex while its cgroup was throttled waited for
// its process's other threads, which the quota held back: the verdict
// says so after its state. Throttled for less than a quarter of the
// request, it does not.
func TestThrottlingAroundABlockedThread(t *testing.T) {
	v := RequestVerdict{Thread: "web[7]", OnCPU: time.Millisecond, Runnable: 3 * time.Millisecond, Blocked: 302 * time.Millisecond, RunnableCPU: 0, Cgroup: "/pod1",
		BlockedIn: []string{"__schedule", "futex_do_wait", "__futex_wait"}, BlockingCall: "futex_do_wait", WokenBy: "web[9] on CPU 0",
		Throttled: &Throttling{Cgroup: "/pod1", QuotaUS: 250000, PeriodUS: 1000000, Times: 1, ThrottledNS: 153 * time.Millisecond}}
	want := "blocked 302 ms in futex_do_wait (stack futex_do_wait ← __futex_wait); woken by web[9] on CPU 0; " +
		"meanwhile its cgroup /pod1 was CPU-throttled (quota 0.25 CPU: 250 ms per 1.00 s; throttled 1 time, 153 ms); 306 ms of the request on web[7]"
	if got := v.sentence(); !strings.HasPrefix(got, want) {
		t.Errorf("\n  %s\nwant\n  %s…", got, want)
	}
	v.Throttled.ThrottledNS = 70 * time.Millisecond
	if got := v.sentence(); strings.Contains(got, "throttled") {
		t.Errorf("a short throttle named: %s", got)
	}
}

func TestMemoryWorkReadsTheChain(t *testing.T) {
	for _, tc := range []struct {
		stack []string
		want  string
	}{
		{[]string{"__schedule", "io_schedule", "folio_wait_bit_common", "filemap_fault", "__do_fault", "do_read_fault", "handle_mm_fault", "do_user_addr_fault", "exc_page_fault", "asm_exc_page_fault"}, "major faults"},
		{[]string{"__schedule", "io_schedule", "folio_wait_bit_common", "do_swap_page", "handle_mm_fault", "exc_page_fault"}, "major faults"},
		{[]string{"shrink_folio_list", "shrink_lruvec", "shrink_node", "do_try_to_free_pages", "try_to_free_mem_cgroup_pages", "try_charge_memcg", "filemap_add_folio"}, "memory cgroup reclaim"},
		{[]string{"shrink_node", "do_try_to_free_pages", "try_to_free_mem_cgroup_pages", "reclaim_high", "mem_cgroup_handle_over_high"}, "memory cgroup reclaim"},
		{[]string{"shrink_folio_list", "shrink_node", "do_try_to_free_pages", "try_to_free_pages", "__alloc_pages_direct_reclaim", "__alloc_pages_slowpath"}, "direct reclaim"},
		{[]string{"isolate_migratepages", "compact_zone", "compact_zone_order", "try_to_compact_pages", "__alloc_pages_direct_compact"}, "compaction"},
		// A fault waiting for the mmap lock is not a major fault; a
		// read(2) waiting for the page cache is not a fault at all.
		{[]string{"__schedule", "rwsem_down_read_slowpath", "lock_mm_and_find_vma", "do_user_addr_fault", "exc_page_fault"}, ""},
		{[]string{"__schedule", "io_schedule", "folio_wait_bit_common", "filemap_get_pages", "filemap_read", "vfs_read"}, ""},
		{[]string{"__schedule", "do_nanosleep"}, ""},
	} {
		if got := memoryWork(tc.stack); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.stack, got, tc.want)
		}
	}
}

func TestMemoryCausesWords(t *testing.T) {
	v := RequestVerdict{Thread: "web[7]", OnCPU: 40 * time.Millisecond, Blocked: 110 * time.Millisecond, RunnableCPU: -1,
		Reclaim: &KernelWork{What: "memory cgroup reclaim", NS: 120 * time.Millisecond, Cgroup: "/kubepods/pod1", LimitBytes: 256 << 20}}
	if got, want := v.sentence(), "in direct reclaim of its memory cgroup /kubepods/pod1 (limit 256 MiB) for 120 ms; blocked 110 ms; 150 ms of the request on web[7]: on CPU 40 ms, runnable 0 µs, blocked 110 ms"; got != want {
		t.Errorf("reclaim:\n  %s\nwant\n  %s", got, want)
	}
	// A tenth of the request follows its state instead of leading.
	v.Reclaim = nil
	v.MajorFaults = &KernelWork{What: "major faults", NS: 20 * time.Millisecond, Waits: 3}
	if got, want := v.sentence(), "blocked 110 ms; waited 20 ms on major page faults (3 faults); 150 ms of the request on web[7]: on CPU 40 ms, runnable 0 µs, blocked 110 ms"; got != want {
		t.Errorf("faults:\n  %s\nwant\n  %s", got, want)
	}
	// Less than that: not named.
	v.MajorFaults.NS = 5 * time.Millisecond
	if got := v.sentence(); strings.Contains(got, "fault") {
		t.Errorf("a small wait named: %s", got)
	}
	for n, want := range map[int64]string{256 << 20: "256 MiB", 1536 << 20: "1.5 GiB", 512: "512 B", 10 << 10: "10 KiB"} {
		if got := bytesIEC(n); got != want {
			t.Errorf("bytesIEC(%d) = %q, want %q", n, got, want)
		}
	}
}
