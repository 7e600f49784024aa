// Command podapp is the program of the tests' pod image: an HTTP server and
// the clients that check, from inside a pod, what the node must provide.
//
//	podapp serve ADDR           /healthz, / (its hostname), /whoami (pid 1, capabilities, hostname);
//	                            ADDR is host:port or unix:PATH
//	podapp get URL WANT         GET URL until the body holds WANT (60 s)
//	podapp dial ADDR WANT       read a line from a TCP server until it is WANT (60 s)
//	podapp perf-cpu0 WANTCAPS   open a system-wide cpu-clock perf event on CPU 0 (what the
//	                            agent's perf backend needs) with exactly the effective
//	                            capabilities WANTCAPS (hex, as in /proc/self/status)
//	podapp whoami-api WANT      ask the API server, through the kubernetes Service and
//	                            the pod's ServiceAccount token, who it is; WANT is the username
package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: podapp serve ADDR | get URL WANT | dial ADDR WANT | whoami-api WANT")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2])
	case "get":
		err = retry(func() error { return get(os.Args[2], os.Args[3]) })
	case "dial":
		err = retry(func() error { return dial(os.Args[2], os.Args[3]) })
	case "perf-cpu0":
		err = perfCPU0(os.Args[2])
	case "whoami-api":
		err = retry(func() error { return whoamiAPI(os.Args[2]) })
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "podapp:", err)
		os.Exit(1)
	}
	fmt.Println("podapp: ok")
}

// retry tries f each second for up to 150 s, under the test's own wait of
// 3 minutes: on a loaded 2-core machine a new Service's rules can take
// tens of seconds to reach iptables.
func retry(f func() error) error {
	deadline := time.Now().Add(150 * time.Second)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		fmt.Fprintln(os.Stderr, "podapp: retrying:", err)
		time.Sleep(time.Second)
	}
}

func serve(addr string) error {
	host, _ := os.Hostname()
	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "podapp "+host) })
	http.HandleFunc("/whoami", func(w http.ResponseWriter, _ *http.Request) {
		comm, _ := os.ReadFile("/proc/1/comm")
		status, _ := os.ReadFile("/proc/self/status")
		capEff := ""
		for _, l := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
				capEff = strings.TrimSpace(v)
			}
		}
		json.NewEncoder(w).Encode(map[string]string{"pid1": strings.TrimSpace(string(comm)), "capEff": capEff, "hostname": host})
	})
	network := "tcp"
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		network, addr = "unix", path
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		return err
	}
	return http.Serve(l, nil)
}

func get(url, want string) error {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
		return fmt.Errorf("GET %s: %s %q, want 200 with %q", url, resp.Status, body, want)
	}
	fmt.Printf("GET %s: %s\n", url, body)
	return nil
}

func dial(addr, want string) error {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read from %s: %w", addr, err)
	}
	if strings.TrimSpace(line) != want {
		return fmt.Errorf("%s said %q, want %q", addr, line, want)
	}
	return nil
}

func whoamiAPI(want string) error {
	const sa = "/var/run/secrets/kubernetes.io/serviceaccount/"
	token, err := os.ReadFile(sa + "token")
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(sa + "ca.crt")
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("no certificate in %sca.crt", sa)
	}
	url := "https://" + net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")) +
		"/apis/authentication.k8s.io/v1/selfsubjectreviews"
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var review struct {
		Status struct {
			UserInfo struct {
				Username string `json:"username"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("POST %s: %s %s", url, resp.Status, body)
	}
	if err := json.Unmarshal(body, &review); err != nil {
		return err
	}
	if review.Status.UserInfo.Username != want {
		return fmt.Errorf("the API server says this pod is %q, want %q", review.Status.UserInfo.Username, want)
	}
	fmt.Println("API server at", url, "says:", review.Status.UserInfo.Username)
	return nil
}

func perfCPU0(wantCaps string) error {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err
	}
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok && strings.TrimSpace(v) != wantCaps {
			return fmt.Errorf("CapEff is %s, want %s", strings.TrimSpace(v), wantCaps)
		}
	}
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK, Bits: unix.PerfBitDisabled}
	attr.Size = uint32(unsafe.Sizeof(attr))
	fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("perf_event_open(cpu-clock, all processes, CPU 0): %w", err)
	}
	return unix.Close(fd)
}
