package ftrace

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/agents/capture"
)

func TestParseRingStats(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    ringStats
		wantErr bool
	}{
		{
			name: "a real cpu1 stats file of a 64 KiB ring that wrapped",
			in:   fixtureText(t, "testdata/ftrace/stats-cpu1"),
			want: ringStats{Entries: 1232, Overrun: 32133, HasDropped: true},
		},
		{
			name: "every loss counter counts",
			in:   "entries: 5\noverrun: 7\ncommit overrun: 2\nbytes: 100\noldest event ts:  1.5\nnow ts: 2.0\ndropped events: 3\nread events: 0\n",
			want: ringStats{Entries: 5, Overrun: 7, CommitOverrun: 2, Dropped: 3, HasDropped: true},
		},
		{
			name: "a kernel before 3.16 has no dropped events line",
			in:   "entries: 1\noverrun: 4\ncommit overrun: 0\nbytes: 10\n",
			want: ringStats{Entries: 1, Overrun: 4},
		},
		{name: "no overrun line is not a stats file", in: "entries: 1\n", wantErr: true},
		{name: "an empty file is not a stats file", in: "", wantErr: true},
		{name: "a negative overrun is refused", in: "overrun: -1\n", wantErr: true},
		{name: "an overrun past 64 bits is refused", in: "overrun: 18446744073709551616\n", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseRingStats([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
	if got := (ringStats{Overrun: 1, CommitOverrun: 2, Dropped: 4}).lost(); got != 7 {
		t.Errorf("lost() = %d, want 7", got)
	}
}

func TestParseFtraceLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want FtraceEvent
		ok   bool
	}{
		{
			name: "a sched_switch with irq-info flags",
			in:   "  kube-apiserver-27994   [000] d..2. 12099.539701: sched_switch: prev_comm=kube-apiserver prev_pid=27994 prev_prio=120 prev_state=R ==> next_comm=eval.test next_pid=25295 next_prio=120\n",
			want: FtraceEvent{Task: "kube-apiserver", PID: 27994, CPU: 0, Flags: "d..2.", TS: 12099*time.Second + 539701*time.Microsecond, Event: "sched_switch",
				Body: "prev_comm=kube-apiserver prev_pid=27994 prev_prio=120 prev_state=R ==> next_comm=eval.test next_pid=25295 next_prio=120"},
			ok: true,
		},
		{
			name: "the idle task, a tgid column and no flags",
			in:   "          <idle>-0       (-------) [001]  12277.546607: sched_wakeup: comm=eval.test pid=25940 prio=120 target_cpu=000",
			want: FtraceEvent{Task: "<idle>", PID: 0, CPU: 1, TS: 12277*time.Second + 546607*time.Microsecond, Event: "sched_wakeup", Body: "comm=eval.test pid=25940 prio=120 target_cpu=000"},
			ok:   true,
		},
		{
			name: "a task name with dashes, spaces and a bracketed number",
			in:   "  my-app [1] x-42 [003] .... 5.000000001: softirq_entry: vec=3 [action=NET_RX]",
			want: FtraceEvent{Task: "my-app [1] x", PID: 42, CPU: 3, Flags: "....", TS: 5*time.Second + 1, Event: "softirq_entry", Body: "vec=3 [action=NET_RX]"},
			ok:   true,
		},
		{
			name: "a three-digit fraction is milliseconds",
			in:   "a-1 [000] 7.250: irq_handler_exit: irq=1 ret=handled",
			want: FtraceEvent{Task: "a", PID: 1, TS: 7250 * time.Millisecond, Event: "irq_handler_exit", Body: "irq=1 ret=handled"},
			ok:   true,
		},
		{name: "a header comment", in: "#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION"},
		{name: "an empty line", in: "\n"},
		{name: "a lost-events marker", in: "CPU:1 [LOST 123 EVENTS]"},
		{name: "a counter clock's integer timestamp", in: "a-1 [000] .... 123456789: sched_switch: x=1"},
		{name: "a function tracer line has no event colon", in: "a-1 [000] .... 1.000001: do_sys_open <-sys_open"},
		{name: "a pid that is not a number", in: "a-b [000] .... 1.000001: ev: x"},
		{name: "a cpu that is not a number", in: "a-1 [0x0] .... 1.000001: ev: x"},
		{name: "ten fraction digits", in: "a-1 [000] .... 1.0000000001: ev: x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseFtraceLine([]byte(tc.in))
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v (%+v)", ok, tc.ok, got)
			}
			if !ok {
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestFtraceEventField(t *testing.T) {
	ev, ok := ParseFtraceLine([]byte("  kube-apiserver-27994   [000] d..2. 12099.539701: sched_switch: prev_comm=kube-apiserver prev_pid=27994 prev_prio=120 prev_state=S ==> next_comm=eval.test next_pid=25295 next_prio=120"))
	if !ok {
		t.Fatal("line did not parse")
	}
	for name, want := range map[string]string{"prev_pid": "27994", "prev_state": "S", "next_pid": "25295", "next_prio": "120"} {
		if got, ok := ev.Field(name); !ok || got != want {
			t.Errorf("Field(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
	// "pid" must not match inside "prev_pid".
	if got, ok := ev.Field("pid"); ok {
		t.Errorf("Field(pid) = %q, want none", got)
	}
}

func TestParseFtraceLineOnRealTraces(t *testing.T) {
	for _, tc := range []struct {
		file   string
		events int
	}{
		{"testdata/ftrace/trace-irqinfo.txt", 48},
		{"testdata/ftrace/trace-tgid.txt", 8},
		{"testdata/ftrace/events-real.txt", 8},
	} {
		t.Run(tc.file, func(t *testing.T) {
			n := 0
			sc := bufio.NewScanner(strings.NewReader(fixtureText(t, tc.file)))
			for sc.Scan() {
				line := sc.Text()
				ev, ok := ParseFtraceLine([]byte(line))
				if !ok {
					if !strings.HasPrefix(line, "#") {
						t.Errorf("event line did not parse: %q", line)
					}
					continue
				}
				n++
				if ev.TS < 12000*time.Second || ev.TS > 13000*time.Second {
					t.Errorf("timestamp %v out of the capture's range: %q", ev.TS, line)
				}
				if !strings.Contains(line, " "+ev.Event+": ") {
					t.Errorf("event %q is not in %q", ev.Event, line)
				}
			}
			if n != tc.events {
				t.Errorf("%d events, want %d", n, tc.events)
			}
		})
	}
}

func TestFtraceEventPath(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"sched/sched_switch", "events/sched/sched_switch"},
		{"irq", "events/irq"},
		{"block/block_rq_issue", "events/block/block_rq_issue"},
		{"sched/../../tracing_on", ""},
		{"../trace", ""},
		{"sched/", ""},
		{"/sched", ""},
		{"sched/sched_switch/enable", ""},
		{"sched:sched_switch", ""},
		{"", ""},
	} {
		got, err := ftraceEventPath(tc.in)
		if tc.want == "" {
			if !errors.Is(err, capture.ErrInvalid) {
				t.Errorf("ftraceEventPath(%q) = %q, %v; want ErrInvalid", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ftraceEventPath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseFtraceLine(f *testing.F) {
	for _, file := range []string{"testdata/ftrace/trace-irqinfo.txt", "testdata/ftrace/trace-tgid.txt", "testdata/ftrace/events-real.txt"} {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for line := range bytes.Lines(b) {
			f.Add(line)
		}
	}
	f.Add([]byte("a [1] b-2 [003] .... 5.000000001: e: x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, ok := ParseFtraceLine(b)
		if !ok {
			return
		}
		if ev.PID < 0 || ev.CPU < 0 || ev.TS < 0 {
			t.Fatalf("negative field in %+v", ev)
		}
		if ev.Event == "" || strings.ContainsAny(ev.Event, " \n") {
			t.Fatalf("event name %q", ev.Event)
		}
	})
}

func FuzzParseRingStats(f *testing.F) {
	b, err := os.ReadFile("testdata/ftrace/stats-cpu1")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte("overrun: 1\ncommit overrun: 2\ndropped events: 3\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := parseRingStats(b)
		if err != nil {
			return
		}
		if !bytes.Contains(b, []byte("overrun")) {
			t.Fatalf("accepted a file without an overrun line: %+v", s)
		}
		if s.Dropped > 0 && !s.HasDropped {
			t.Fatalf("dropped %d without a dropped line", s.Dropped)
		}
	})
}

func fixtureText(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
