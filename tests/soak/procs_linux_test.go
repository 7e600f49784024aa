package soak

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// soakEnv turns the soak on: it takes SOAK_MINUTES of both cores, so
// make test (where it is unset) only checks that the package builds.
const soakEnv = "SPIKEHUNT_SOAK"

// The binaries under test, built by TestMain when the soak is on.
var agentBin, spikehuntBin string

// skipRecovery is the control run: the named step leaves out its
// recovery, and the soak must then fail.
var skipRecovery = flag.String("soak.skip-recovery", "", "control run: leave out these steps' recoveries, comma-separated ("+strings.Join(stepNames, ", ")+"); the soak must fail")

func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv(soakEnv) != "1" {
		os.Exit(m.Run())
	}
	var cleanup func()
	var err error
	agentBin, spikehuntBin, cleanup, err = testenv.BuildChainBinaries("spikehunt-soak-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// freeAddr is a loopback address nobody listens on: the components that
// the soak restarts must come back on the address the others know.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// rssKiB is VmRSS of pid, 0 when it is gone.
func rssKiB(pid int) int64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

var httpc = &http.Client{Timeout: 5 * time.Second}

// get asks url, and returns its answer only when it is 200 OK; the
// caller closes the body.
func get(url string) (*http.Response, error) {
	resp, err := httpc.Get(url)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return resp, nil
}

// fetchTo writes what url answers (at most 64 MiB) to the file name.
func fetchTo(url, name string) error {
	resp, err := get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, io.LimitReader(resp.Body, 64<<20)); err != nil {
		f.Close()
		return fmt.Errorf("read %s: %w", url, err)
	}
	return f.Close()
}

// scrape reads a Prometheus text endpoint into series → value (the
// series as written: name{labels}).
func scrape(url string) (map[string]float64, error) {
	resp, err := get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", url, err)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(l[i+1:], 64); err == nil {
			m[l[:i]] = v
		}
	}
	return m, sc.Err()
}

// sum adds the series of m whose name is name and whose labels contain
// every one of labels (`table="requests"`).
func sum(m map[string]float64, name string, labels ...string) float64 {
	var s float64
next:
	for k, v := range m {
		if k != name && !strings.HasPrefix(k, name+"{") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(k, l) {
				continue next
			}
		}
		s += v
	}
	return s
}

// healthz is the status code of url, 0 when it does not answer.
func healthz(url string) int {
	resp, err := httpc.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// keepFull appends to name every byte its file system frees, every
// 50 ms, until the returned stop is called (stop is idempotent).
func keepFull(name string) (stop func()) {
	done := make(chan struct{})
	var once sync.Once
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return
		}
		defer f.Close()
		buf := make([]byte, 64<<10)
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			for {
				if _, err := f.Write(buf); err != nil {
					break
				}
			}
			for { // the last bytes a 64 KiB write does not fit in
				if _, err := f.Write(buf[:4096]); err != nil {
					break
				}
			}
		}
	}()
	return func() {
		once.Do(func() { close(done); <-stopped })
	}
}

// logf is the soak's own log line, timestamped, to the test log.
type logger struct {
	t  testing.TB
	mu sync.Mutex
	t0 time.Time
}

func (l *logger) printf(format string, a ...any) {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Logf("[%s +%5.0fs] %s", time.Now().UTC().Format("15:04:05"), time.Since(l.t0).Seconds(), fmt.Sprintf(format, a...))
}
