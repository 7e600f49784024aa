package bpftrace

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// bpftraceScriptDir copies the shipped scripts into a folder of the
// test's own: a checkout's modes follow the umask, and the backend
// refuses a folder others may write.
func bpftraceScriptDir(t *testing.T, extra map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "scripts")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shipped, err := filepath.Glob("scripts/*.bt")
	if err != nil || len(shipped) == 0 {
		t.Fatalf("no shipped scripts: %v", err)
	}
	for _, s := range shipped {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(s)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, text := range extra {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// bpftraceForTest returns the backend on the machine's bpftrace; it skips
// (or fails under SPIKEHUNT_REQUIRE_PRIVILEGED=1) without bpftrace or root.
func bpftraceForTest(t *testing.T, scripts string) capture.Backend {
	t.Helper()
	b := New(Config{ScriptDir: scripts})
	if err := b.Check(); err != nil {
		testenv.RequirePrivileged(t, "bpftrace", err)
	}
	return b
}

// bpftraceFileBlocks reads an output file back: the blocks' numbers and
// texts, in order.
func bpftraceFileBlocks(t *testing.T, path string) ([]int64, []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ns []int64
	var texts []string
	var cur *strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		n, _, begin, ok := bpftraceMarkerLine(sc.Bytes())
		switch {
		case ok && begin:
			ns = append(ns, n)
			cur = &strings.Builder{}
		case ok:
			texts = append(texts, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(sc.Text() + "\n")
		}
	}
	if len(ns) != len(texts) {
		t.Fatalf("%s: %d blocks begin, %d end", path, len(ns), len(texts))
	}
	return ns, texts
}

var (
	softirqHistRE = regexp.MustCompile(`(?m)^@softirq_us\[(\d+)\]: *$`)
	histBucketRE  = regexp.MustCompile(`^\[[0-9KMGT, ]+[\])]\s+(\d+) \|[@ ]*\|$`)
)

// softirqCounts sums, per CPU, the counts of a block's softirq histograms.
func softirqCounts(t *testing.T, text string) map[int]int {
	t.Helper()
	out := map[int]int{}
	cpu := -1
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\n")
		if m := softirqHistRE.FindStringSubmatch(line); m != nil {
			cpu, _ = strconv.Atoi(m[1])
			continue
		}
		if strings.HasPrefix(line, "@") || line == "" {
			cpu = -1
			continue
		}
		if m := histBucketRE.FindStringSubmatch(line); m != nil && cpu >= 0 {
			n, _ := strconv.Atoi(m[1])
			out[cpu] += n
		}
	}
	return out
}

func TestBpftraceIrqDurationRecordsPerCPUSoftirqHistograms(t *testing.T) {
	scripts := bpftraceScriptDir(t, nil)
	b := bpftraceForTest(t, scripts)
	dir := t.TempDir()
	spec := capture.Spec{ID: fmt.Sprintf("test-bpftrace-%d", os.Getpid()), Backend: capture.Bpftrace, Script: "irq_duration", Pre: 3 * time.Second, Post: time.Second}
	rec, err := b.New(spec, dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	if err := rec.Arm(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Disarm() })
	t.Logf("armed in %v", time.Since(start))
	time.Sleep(2500 * time.Millisecond)
	if err := rec.Fire(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond)
	res, err := rec.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	t.Logf("result %+v", res)

	script := "bpftrace-irq_duration.bt"
	if got := strings.Join(res.Files, ","); got != script+","+BpftracePreFile+","+BpftracePostFile {
		t.Errorf("files %s", got)
	}
	if got, want := fixtureText(t, filepath.Join(dir, script)), fixtureText(t, "scripts/irq_duration.bt"); got != want {
		t.Errorf("the artifact's copy of the script differs from the one that ran")
	}
	if p := rec.(*bpftraceRecorder).cmd.ProcessState; p == nil || !p.Exited() || p.ExitCode() != 0 {
		t.Errorf("bpftrace did not exit cleanly on SIGINT: %v", p)
	}
	if rec.(*bpftraceRecorder).killed {
		t.Error("bpftrace had to be killed")
	}

	preN, preTexts := bpftraceFileBlocks(t, filepath.Join(dir, BpftracePreFile))
	postN, postTexts := bpftraceFileBlocks(t, filepath.Join(dir, BpftracePostFile))
	t.Logf("pre blocks %v, post blocks %v", preN, postN)
	// Arm waits for interval 1; 2.5 s later intervals 1–3 are in. The
	// post-window has the interval running at fire, one more, and the
	// partial one END prints.
	if len(preN) < 2 || len(postN) < 2 {
		t.Fatalf("%d pre and %d post blocks, want at least 2 each", len(preN), len(postN))
	}
	// The numbers run on without a gap, but for intervals bpftrace itself
	// never printed before its END block, which the recorder must name.
	all := append(append([]int64{}, preN...), postN...)
	unprinted := false
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1]+1 {
			continue
		}
		if i == len(all)-1 && all[i] > all[i-1] && slices.ContainsFunc(res.Notes, func(n string) bool { return strings.Contains(n, "stopped before it printed it") }) {
			unprinted = true
			continue
		}
		t.Errorf("interval numbers %v skip or repeat: a block went missing between the windows (notes %v)", all, res.Notes)
		break
	}
	if unprinted {
		t.Logf("bpftrace did not print an interval before END, and the recorder said so: %v", res.Notes)
	}
	for i, text := range append(append([]string{}, preTexts...), postTexts...) {
		counts := softirqCounts(t, text)
		total := 0
		for cpu, n := range counts {
			if cpu >= runtime.NumCPU() {
				t.Errorf("block %d: softirq histogram of CPU %d on a %d-CPU machine", all[i], cpu, runtime.NumCPU())
			}
			total += n
		}
		// The last block is END's partial interval, which may be short
		// enough to hold none.
		if total == 0 && i != len(all)-1 {
			t.Errorf("block %d has no softirq in its histograms:\n%s", all[i], text)
		}
	}
	// Every block carries the agent's wall clock at arrival, inside the
	// capture's run.
	received := regexp.MustCompile(`(?m)^# received (\S+)$`)
	for _, f := range []string{BpftracePreFile, BpftracePostFile} {
		for _, m := range received.FindAllStringSubmatch(fixtureText(t, filepath.Join(dir, f)), -1) {
			at, err := time.Parse(time.RFC3339Nano, m[1])
			if err != nil || at.Before(start) || at.After(end) {
				t.Errorf("%s: block received at %s (%v), outside the run [%v, %v]", f, m[1], err, start, end)
			}
		}
	}
	if err := rec.Disarm(); err != nil {
		t.Errorf("Disarm after Collect: %v", err)
	}
}

func TestBpftraceArmReportsWhatBpftraceSaid(t *testing.T) {
	scripts := bpftraceScriptDir(t, map[string]string{
		"typo.bt":   "tracepoint:irq:softirq_entyr { @n = count(); }\n",
		"silent.bt": "tracepoint:irq:softirq_entry { @n = count(); }\n",
		"syntax.bt": "this is not bpftrace\n",
	})
	b := bpftraceForTest(t, scripts)
	for _, tc := range []struct {
		script, want string
		timeout      time.Duration
	}{
		{"typo", "softirq_entyr", 30 * time.Second},
		{"syntax", "stdin:1", 30 * time.Second},
		// A script that never prints an interval marker is not armed.
		{"silent", "context deadline exceeded", 3 * time.Second},
	} {
		t.Run(tc.script, func(t *testing.T) {
			rec, err := b.New(capture.Spec{ID: "c-" + tc.script, Backend: capture.Bpftrace, Script: tc.script}, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			err = rec.Arm(ctx)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Arm = %v, want an error saying %q", err, tc.want)
			}
			if p := rec.(*bpftraceRecorder).cmd.ProcessState; p == nil {
				t.Error("bpftrace still runs after a failed Arm")
			}
			if err := rec.Disarm(); err != nil {
				t.Errorf("Disarm: %v", err)
			}
		})
	}
}

func TestBpftraceRejectsScriptsOutsideTheAllowList(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "evil.bt"), []byte("BEGIN { exit(); }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	scripts := bpftraceScriptDir(t, map[string]string{"group-writable.bt": "BEGIN { exit(); }\n"})
	for name, target := range map[string]string{
		"evil.bt":     filepath.Join(outside, "evil.bt"),
		"relative.bt": filepath.Join("..", "..", filepath.Base(outside), "evil.bt"),
		"alias.bt":    "irq_duration.bt",
	} {
		if err := os.Symlink(target, filepath.Join(scripts, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(scripts, "group-writable.bt"), 0o664); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(scripts, "folder.bt"), 0o755); err != nil {
		t.Fatal(err)
	}
	// New reads and checks the script; it needs no bpftrace, but root to
	// own the folder the way the backend wants.
	if os.Geteuid() != 0 {
		testenv.RequirePrivileged(t, "root (the script folder must be root's)", errors.New("not root"))
	}
	b := New(Config{ScriptDir: scripts, Binary: "/nonexistent/bpftrace"})
	for _, tc := range []struct {
		name string
		spec capture.Spec
		want error
		says string
	}{
		{"an unknown script, listing the allowed ones", capture.Spec{Script: "nope"}, capture.ErrInvalid, "irq_duration"},
		{"a path that climbs", capture.Spec{Script: "../etc/passwd"}, capture.ErrInvalid, "without \"..\""},
		{"an absolute path", capture.Spec{Script: "/etc/passwd"}, capture.ErrInvalid, "script"},
		{"a name with the extension", capture.Spec{Script: "irq_duration.bt"}, capture.ErrInvalid, "no bpftrace script"},
		{"a symlink to a file outside the folder", capture.Spec{Script: "evil"}, capture.ErrInvalid, "escapes"},
		{"a relative symlink out of the folder", capture.Spec{Script: "relative"}, capture.ErrInvalid, "escapes"},
		{"a directory", capture.Spec{Script: "folder"}, capture.ErrInvalid, "not a regular file"},
		{"a script others may write", capture.Spec{Script: "group-writable"}, capture.ErrNotSupported, "chmod go-w"},
		{"no script", capture.Spec{}, capture.ErrInvalid, "needs a script"},
		{"a profile", capture.Spec{Script: "irq_duration", Profile: "oncpu"}, capture.ErrInvalid, "profile"},
		{"a ring size", capture.Spec{Script: "irq_duration", RingKB: 4096}, capture.ErrInvalid, "ring"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.ID, tc.spec.Backend = "c1", capture.Bpftrace
			rec, err := b.New(tc.spec, t.TempDir())
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("New = %v, %v; want %v saying %q", rec, err, tc.want, tc.says)
			}
		})
	}
	t.Run("a symlink inside the folder is allowed", func(t *testing.T) {
		rec, err := b.New(capture.Spec{ID: "c1", Backend: capture.Bpftrace, Script: "alias"}, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(rec.(*bpftraceRecorder).program), fixtureText(t, "scripts/irq_duration.bt"); got != want {
			t.Error("the alias did not read irq_duration.bt")
		}
	})
	t.Run("a folder others may write", func(t *testing.T) {
		if err := os.Chmod(scripts, 0o777); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(scripts, 0o755)
		_, err := b.New(capture.Spec{ID: "c1", Backend: capture.Bpftrace, Script: "irq_duration"}, t.TempDir())
		if !errors.Is(err, capture.ErrNotSupported) || !strings.Contains(err.Error(), "chmod go-w") {
			t.Errorf("New = %v, want ErrNotSupported saying chmod go-w", err)
		}
	})
}

// The agent runs the folder's scripts as root: a folder, a script, or a
// folder above them that another user owns is refused with the fix, even
// when its mode lets no one else write it (its owner may change the mode).
func TestBpftraceRefusesAScriptFolderOrScriptNotOwnedByRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.RequirePrivileged(t, "root (chown)", errors.New("not root"))
	}
	const nobody = 65534
	scripts := bpftraceScriptDir(t, nil)
	script := filepath.Join(scripts, "irq_duration.bt")
	b := New(Config{ScriptDir: scripts, Binary: "/nonexistent/bpftrace"})
	arm := func() error {
		_, err := b.New(capture.Spec{ID: "c1", Backend: capture.Bpftrace, Script: "irq_duration"}, t.TempDir())
		return err
	}
	if err := arm(); err != nil {
		t.Fatalf("a root-owned folder and script: %v", err)
	}
	for _, tc := range []struct {
		name, path, says string
	}{
		{"the folder", scripts, "bpftrace script folder " + scripts + " is owned by uid 65534, not root"},
		{"the script", script, "bpftrace script " + script + " is owned by uid 65534, not root"},
		{"the folder above", filepath.Dir(scripts), "folder above the bpftrace script folder " + filepath.Dir(scripts) + " is owned by uid 65534"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.Chown(tc.path, nobody, nobody); err != nil {
				t.Fatal(err)
			}
			defer os.Chown(tc.path, 0, 0)
			err := arm()
			if !errors.Is(err, capture.ErrNotSupported) || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "chown root") {
				t.Errorf("New = %v, want ErrNotSupported saying %q and chown root", err, tc.says)
			}
			if tc.path != script {
				if err := bpftraceCheckDir(scripts); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
					t.Errorf("Check's folder test = %v, want it refused", err)
				}
			}
		})
	}
}

func TestBpftraceMissingIsNotSupported(t *testing.T) {
	scripts := bpftraceScriptDir(t, nil)
	b := New(Config{ScriptDir: scripts, Binary: "/nonexistent/bpftrace"})
	if err := b.Check(); !errors.Is(err, capture.ErrNotSupported) {
		t.Errorf("Check = %v, want ErrNotSupported", err)
	}
	rec, err := b.New(capture.Spec{ID: "c1", Backend: capture.Bpftrace, Script: "irq_duration"}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Arm(context.Background()); !errors.Is(err, capture.ErrNotSupported) {
		t.Errorf("Arm = %v, want ErrNotSupported", err)
	}
	if err := rec.Disarm(); err != nil {
		t.Errorf("Disarm: %v", err)
	}
	if err := New(Config{}).Check(); !errors.Is(err, capture.ErrNotSupported) {
		t.Errorf("Check without a script folder = %v, want ErrNotSupported", err)
	}
}

func fixtureText(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
