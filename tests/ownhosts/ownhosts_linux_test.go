package ownhosts

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// The README's blocks, each a ```sh fence right after a marker comment
// `<!-- own-hosts:NAME -->`.
var blockRe = regexp.MustCompile("(?s)<!-- own-hosts:([a-z]+) -->\\s*```sh\\n(.*?)```")

func readmeBlocks(t *testing.T, readme string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string]string{}
	for _, m := range blockRe.FindAllStringSubmatch(string(raw), -1) {
		if _, dup := blocks[m[1]]; dup {
			t.Fatalf("README: two own-hosts:%s blocks", m[1])
		}
		blocks[m[1]] = m[2]
	}
	for _, name := range []string{"settings", "store", "agent", "look"} {
		if blocks[name] == "" {
			t.Fatalf("README has no `<!-- own-hosts:%s -->` shell block", name)
		}
	}
	return blocks
}

// settingsRe is one line of the settings block: a variable and its value,
// then a comment.
var settingsRe = regexp.MustCompile(`^([A-Z_]+)=\S+(\s+#.*)?$`)

// The README's own-hosts path, run as written on this machine: the store
// block (Kafka from the pinned jars, the store, ingest, detect), the agent
// block twice, as two hosts, and the look block, which must find the stall
// both hosts had. The settings block is the one the test replaces with its
// own values (free ports, a temporary folder); besides, it moves what two
// agents on one machine cannot share (their host name, ports and
// sockets) and the ingest's metrics port, by flags put before the
// README's own.
func TestTheREADMEsOwnHostsCommandsFindAStallOnTwoHosts(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeBlocks(t, filepath.Join(root, "README.md"))
	settings := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(blocks["settings"]), "\n") {
		m := settingsRe.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			t.Fatalf("README own-hosts:settings: %q is not VAR=value # comment", l)
		}
		settings[m[1]] = true
	}
	for _, v := range []string{"KAFKA", "STORE", "DATA"} {
		if !settings[v] {
			t.Fatalf("README own-hosts:settings sets no %s", v)
		}
	}

	tmp := t.TempDir()
	prefix := filepath.Join(tmp, "prefix")
	kafkaLibs := installPrefix(t, root, prefix)

	kafkaPort := freePortPair(t)
	data := filepath.Join(tmp, "store-host")
	env := func(dataDir string) []string {
		e := []string{}
		for _, kv := range os.Environ() {
			if k, _, _ := strings.Cut(kv, "="); k != "PATH" && k != "SPIKEHUNT_LIBCHDB" && !settings[k] {
				e = append(e, kv)
			}
		}
		return append(e, "PATH="+filepath.Join(prefix, "bin")+":"+os.Getenv("PATH"), "SPIKEHUNT_KAFKA_LIBS="+kafkaLibs,
			fmt.Sprintf("KAFKA=127.0.0.1:%d", kafkaPort), "STORE="+freeAddr(t), "DATA="+dataDir)
	}
	storeEnv := env(data)
	storeAddr := lookup(storeEnv, "STORE")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	store := rewrite(blocks["store"], "spikehunt ingest", "--listen 127.0.0.1:0")
	runBlock(t, ctx, "store", root, storeEnv, store, filepath.Join(tmp, "store-block.log"))
	t.Cleanup(func() { dumpLogs(t, data) })

	kafkaAddr := lookup(storeEnv, "KAFKA")
	checkKafkaRefusesPlaintext(t, kafkaAddr)

	hosts := []string{"host-a", "host-b"}
	udp := map[string]string{}
	for _, h := range hosts {
		// The README's copy of the store host's client files (ca.pem and
		// the password) to the same folder on every host.
		copyClientFiles(t, filepath.Join(data, "kafka", "client"), filepath.Join(tmp, h, "kafka", "client"))
		udp[h] = freeUDPAddr(t)
		agent := rewrite(blocks["agent"], "spikehunt-agent", fmt.Sprintf(
			`--host-name %s --listen 127.0.0.1:0 --intake.line-udp %s --intake.line-unix "" --intake.otlp-grpc "" --intake.otlp-http "" --capture.socket ""`,
			h, udp[h]))
		dir := filepath.Join(tmp, h)
		runBlock(t, ctx, h, root, env(dir), agent, filepath.Join(tmp, h+"-block.log"))
		t.Cleanup(func() { dumpLogs(t, dir) })
	}

	// The apps: ~100 requests/s of a few ms on each host for 40 s, then a
	// stall of about a second on both (each request ~800 ms), then 10 s more.
	stallFrom := sendRequests(t, ctx, udp, hosts, 40*time.Second, 1200*time.Millisecond, 10*time.Second)
	t.Logf("stalled both hosts at %s", stallFrom.Format(time.RFC3339))

	var out string
	for {
		look := exec.CommandContext(ctx, "bash", "-euc", blocks["look"])
		look.Dir, look.Env = root, storeEnv
		b, err := look.CombinedOutput()
		out = string(b)
		if err == nil && strings.Contains(out, "host-a") && strings.Contains(out, "host-b") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the README's look block never named both hosts' spike (store %s): %v\n%s", storeAddr, err, out)
		case <-time.After(10 * time.Second):
		}
	}
	t.Logf("the README's look block:\n%s", out)
	for _, h := range hosts {
		if !spikeOn(out, h, stallFrom) {
			t.Errorf("no spike window of %s at the stall (%s):\n%s", h, stallFrom.Format("15:04:05"), out)
		}
	}
}

// rewrite puts flags right after each command that starts a line with cmd.
func rewrite(block, cmd, flags string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(block, "\n") {
		if rest, ok := strings.CutPrefix(l, cmd+" "); ok {
			l = cmd + " " + flags + " " + rest
		}
		b.WriteString(l)
	}
	return b.String()
}

// runBlock runs a block with bash -eu in its own process group, which the
// test's cleanup ends whole: the block's background commands (Kafka's JVM,
// the services, an agent) stay in it after bash returns.
func runBlock(t *testing.T, ctx context.Context, name, dir string, env []string, block, logFile string) {
	t.Helper()
	log, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command("bash", "-euc", block)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() { stopGroup(pgid) })
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		out, _ := os.ReadFile(logFile)
		t.Fatalf("the README's own-hosts %s block: %v\n%s", name, err, out)
	}
}

// stopGroup ends a process group: SIGTERM, then SIGKILL to what is left
// after 10 s.
func stopGroup(pgid int) {
	if syscall.Kill(-pgid, syscall.SIGTERM) != nil {
		return
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if syscall.Kill(-pgid, 0) != nil {
			return
		}
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
}

// sendRequests sends the line protocol to every host's agent: fast
// requests for before, slow ones for stall, fast ones for after; it
// returns when the stall began.
func sendRequests(t *testing.T, ctx context.Context, udp map[string]string, hosts []string, before, stall, after time.Duration) time.Time {
	t.Helper()
	conns := make([]net.Conn, len(hosts))
	for i, h := range hosts {
		c, err := net.Dial("udp", udp[h])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	return sendOn(t, ctx, conns, before, stall, after)
}

// sendOn is sendRequests over connections already dialled.
func sendOn(t *testing.T, ctx context.Context, conns []net.Conn, before, stall, after time.Duration) time.Time {
	t.Helper()
	start := time.Now()
	stallFrom, stallTo, end := start.Add(before), start.Add(before+stall), start.Add(before+stall+after)
	for now := time.Now(); now.Before(end); now = time.Now() {
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
		for _, c := range conns {
			us := 3000 + rand.IntN(3000)
			if !now.Before(stallFrom) && now.Before(stallTo) {
				us = 700_000 + rand.IntN(200_000)
			}
			fmt.Fprintf(c, "checkout /pay %d 200\n", us)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return stallFrom
}

// spikeOn reports whether the spikes table has a row of host whose window
// starts within 10 s of at (the table prints UTC to the second).
func spikeOn(table, host string, at time.Time) bool {
	for _, l := range strings.Split(table, "\n") {
		f := strings.Fields(l)
		for i := 0; i+2 < len(f); i++ {
			if f[i] != host {
				continue
			}
			for j := i + 1; j+1 < len(f); j++ {
				ts, err := time.Parse("2006-01-02 15:04:05", f[j]+" "+f[j+1])
				if err == nil && ts.Sub(at.UTC().Truncate(time.Second)).Abs() <= 10*time.Second {
					return true
				}
			}
		}
	}
	return false
}

// installPrefix lays out under prefix what `make install` does (the
// binaries in bin, libchdb.so and the dashboards beside them) and returns
// the pinned Kafka's jars, which deploy/kafka.sh takes from
// SPIKEHUNT_KAFKA_LIBS instead of fetching them.
func installPrefix(t *testing.T, root, prefix string) (kafkaLibs string) {
	t.Helper()
	paths, err := testenv.Paths()
	if err != nil {
		t.Fatal(err)
	}
	libchdb, err := paths.LibCHDBFile()
	if err != nil {
		t.Fatal(err)
	}
	if kafkaLibs, err = paths.KafkaLibsDir(); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("java"); err != nil {
		t.Fatal("java not found: the README's prerequisites name Java")
	}
	for _, b := range []struct{ name, pkg string }{{"spikehunt", "./pipelines/cmd/spikehunt"}, {"spikehunt-agent", "./agents/cmd/spikehunt-agent"}} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(prefix, "bin", b.name), b.pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	installFiles(t, []string{libchdb}, filepath.Join(prefix, "lib", "spikehunt"))
	boards, _ := filepath.Glob(filepath.Join(root, "dashboards", "grafana", "*.json"))
	installFiles(t, boards, filepath.Join(prefix, "share", "spikehunt", "dashboards"))
	return kafkaLibs
}

func installFiles(t *testing.T, files []string, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func lookup(env []string, key string) string {
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == key {
			return v
		}
	}
	return ""
}

// freeAddr is a free loopback TCP address.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// freePortPair is a port p with p and p+1 free on loopback: Kafka's
// listener and, as deploy/kafka.sh puts it, its controller's.
func freePortPair(t *testing.T) int {
	t.Helper()
	for range 50 {
		a, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := a.Addr().(*net.TCPAddr).Port
		b, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+1))
		a.Close()
		if err == nil {
			b.Close()
			return p
		}
	}
	t.Fatal("no two consecutive free ports on 127.0.0.1")
	return 0
}

func freeUDPAddr(t *testing.T) string {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().String()
}

// dumpLogs logs the last lines of every *.log in dir when the test failed.
func dumpLogs(t *testing.T, dir string) {
	if !t.Failed() {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		lines := bytes.Split(b, []byte("\n"))
		if len(lines) > 30 {
			lines = lines[len(lines)-30:]
		}
		t.Logf("%s:\n%s", l, bytes.Join(lines, []byte("\n")))
	}
}

// copyClientFiles copies what deploy/kafka.sh keeps for clients, as the
// README has a person do with scp -p.
func copyClientFiles(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ca.pem", "password"} {
		b, err := os.ReadFile(filepath.Join(from, name))
		if err != nil {
			t.Fatalf("deploy/kafka.sh's client files: %v", err)
		}
		if err := os.WriteFile(filepath.Join(to, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := os.Stat(filepath.Join(from, "password")); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("deploy/kafka.sh's password file: %v, mode %v; want readable by its owner only", err, fi.Mode().Perm())
	}
}

// checkKafkaRefusesPlaintext: a client that speaks Kafka without TLS
// gets no answer from the README's Kafka. It sends an ApiVersions
// request, the first thing every client sends, in plaintext; a plaintext
// listener would answer it with the same correlation id.
func checkKafkaRefusesPlaintext(t *testing.T, addr string) {
	t.Helper()
	// The store block starts Kafka in the background and does not wait
	// for it.
	var c net.Conn
	var err error
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		if c, err = net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Kafka at %s: %v", addr, err)
		}
	}
	defer c.Close()
	const clientID = "ownhosts-test"
	req := binary.BigEndian.AppendUint32(nil, uint32(2+2+4+2+len(clientID)))
	req = binary.BigEndian.AppendUint16(req, 18) // ApiVersions
	req = binary.BigEndian.AppendUint16(req, 0)  // version 0
	req = binary.BigEndian.AppendUint32(req, 4242)
	req = binary.BigEndian.AppendUint16(req, uint16(len(clientID)))
	req = append(req, clientID...)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(req); err != nil {
		return // refused outright
	}
	var head [8]byte
	if _, err := io.ReadFull(c, head[:]); err == nil && binary.BigEndian.Uint32(head[4:]) == 4242 {
		t.Errorf("Kafka at %s answered a plaintext ApiVersions request: its listener takes clients without TLS", addr)
	}
}
