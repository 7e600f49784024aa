package peers

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spikehunt/spikehunt/tests/growth"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// procCPUSeconds is a process's user + system CPU time so far.
func procCPUSeconds(pid int) float64 {
	u, s := testenv.ProcCPU(pid)
	return u + s
}

// procMemMiB is a process's peak (VmHWM) and current (VmRSS) resident set
// in MiB (tests/growth reads them).
func procMemMiB(pid int) (peak, now float64, err error) {
	if peak, err = growth.PeakMiB(pid); err == nil {
		now, err = growth.RSSMiB(pid)
	}
	return peak, now, err
}

// freeAddr is a loopback address no one listens on now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitListening waits until addr accepts TCP connections.
func waitListening(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("nothing listens on %s after %s", addr, timeout)
}

// scrapeSum adds up the samples of the Prometheus text at url whose metric
// name is name (with or without _total) and whose labels contain every
// one of labels (`key="value"`).
func scrapeSum(url, name string, labels ...string) (float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		metric, _, _ := strings.Cut(l, "{")
		metric, _, _ = strings.Cut(metric, " ")
		if metric != name && metric != name+"_total" {
			continue
		}
		ok := true
		for _, want := range labels {
			ok = ok && strings.Contains(l, want)
		}
		if !ok {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("scrape %s: %q: %w", url, l, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// tailBuffer keeps the last bytes a child process wrote.
type tailBuffer struct {
	mu  sync.Mutex
	b   bytes.Buffer
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	if over := t.b.Len() - t.max; over > 0 {
		t.b.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.String()
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
