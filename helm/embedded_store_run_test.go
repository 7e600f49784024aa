package helm_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// podProc is a chart container run as a process of this test: its binary,
// the arguments and environment the render gives it, with the cluster's
// addresses and paths swapped for this machine's (swap), and the libchdb
// of `make deps`.
type podProc struct {
	cmd *exec.Cmd
	out *bytes.Buffer
}

func startContainer(t *testing.T, m manifest, c corev1.Container, swap map[string]string, extra ...string) *podProc {
	t.Helper()
	bin, args, env := commandLine(t, m, c, nil, noSecrets(t))
	for i, a := range args {
		for from, to := range swap {
			a = strings.ReplaceAll(a, from, to)
		}
		args[i] = a
	}
	args = append(args, extra...)
	p := &podProc{cmd: exec.Command(bin, args...), out: &bytes.Buffer{}}
	p.cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=/usr/bin:/bin", "SPIKEHUNT_LIBCHDB=" + os.Getenv("SPIKEHUNT_LIBCHDB")}
	for k, v := range env {
		for from, to := range swap {
			v = strings.ReplaceAll(v, from, to)
		}
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *podProc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-done
		t.Fatalf("%s did not finish in %v:\n%s", strings.Join(p.cmd.Args, " "), timeout, p.out)
		return -1
	}
}

// The embedded store as the chart runs it serves the chart's clients: the
// StatefulSet's init container migrates a fresh data directory and its
// serve-clickhouse listens (on every interface, as in the pod, so with
// authentication) with the rendered users and generated passwords; the
// ingest's command line stores a simulated fleet from a real Kafka broker
// through it, the detector's finds the fleet's spikes, Grafana's
// read-only user reads them and cannot write, the migration Job's command
// (a later `spikehunt migrate` over HTTP) finds the schema up to date, and
// the probes' /healthz answers without credentials while queries need them.
func TestTheEmbeddedStoreAsTheChartRunsItServesIngestDetectAndGrafana(t *testing.T) {
	m := render(t, "spikehunt", valuesCase{name: "default+grafana", sets: []string{"grafana.enabled=true"}})
	s := storeSet(t, m)
	data := t.TempDir()
	swap := map[string]string{"chdb:///var/lib/spikehunt/": "chdb://" + data + "/"}

	mig := startContainer(t, m, s.Spec.Template.Spec.InitContainers[0], swap)
	if code := mig.wait(t, time.Minute); code != 0 || !strings.Contains(mig.out.String(), "applied") {
		t.Fatalf("the init container's migration: exit %d\n%s", code, mig.out)
	}
	swap["--listen=:8123"] = "--listen=:0"
	serve := startContainer(t, m, container(t, s.Spec.Template.Spec, "clickhouse"), swap)
	addr := servingAddress(t, serve)

	// The probes' path answers without credentials; a query needs them.
	get := func(path, user, pass string) int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	rw := secretData(t, m, fullname()+"-clickhouse")
	ro := secretData(t, m, fullname()+"-grafana-clickhouse")
	for _, tt := range []struct {
		path, user, pass string
		want             int
	}{
		{"/healthz", "", "", http.StatusOK},
		{"/ping", "", "", http.StatusOK},
		{"/?query=SELECT+1", "", "", http.StatusUnauthorized},
		{"/?query=SELECT+1", rw["username"], "wrong", http.StatusUnauthorized},
		{"/?query=SELECT+1", rw["username"], rw["password"], http.StatusOK},
		{"/?query=SELECT+1", ro["username"], ro["password"], http.StatusOK},
	} {
		if got := get(tt.path, tt.user, tt.pass); got != tt.want {
			t.Errorf("GET %s as %q: %d, want %d", tt.path, tt.user, got, tt.want)
		}
	}

	// Every client dials the Service; here that is the process above.
	swap[fullname()+"-clickhouse:8123"] = addr
	k := testenv.SharedKafka(t)
	swap["kafka:9092"] = k.Brokers()[0]
	swap["--listen=:9465"] = "--listen=127.0.0.1:0"
	swap["--listen=:9466"] = "--listen=127.0.0.1:0"
	ctx := context.Background()
	for _, topic := range []string{"otlp_spans", "otlp_metrics"} {
		if err := k.CreateTopic(ctx, topic, 2); err != nil {
			t.Fatal(err)
		}
	}
	sim := exec.Command(filepath.Join(binaries(t), "spikehunt"), "sim", "--kafka.brokers", k.Brokers()[0], "--hosts", "20", "--duration", "2h")
	if out, err := sim.CombinedOutput(); err != nil {
		t.Fatalf("spikehunt sim: %v\n%s", err, out)
	}

	ingest := startContainer(t, m, m.workload(t, fullname()+"-ingest").template.Spec.Containers[0], swap)
	waitCommitted(t, k, "spikehunt-ingest", []string{"otlp_spans", "otlp_metrics"}, ingest)
	ingest.cmd.Process.Signal(os.Interrupt)
	ingest.wait(t, 30*time.Second)

	signing := t.TempDir()
	for key, v := range secretBytes(t, m, fullname()+"-alert-signing") {
		if err := os.WriteFile(filepath.Join(signing, key), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	swap["/etc/spikehunt/alert-signing"] = signing
	detect := startContainer(t, m, m.workload(t, fullname()+"-detect").template.Spec.Containers[0], swap, "--every=0")
	if code := detect.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("detect (one pass): exit %d\n%s", code, detect.out)
	}

	// Grafana reads what the detector wrote, through its data source's
	// address and its read-only user, and cannot write.
	ds := configMapData(t, m, fullname()+"-grafana-datasource")["spikehunt-datasource.yaml"]
	if !strings.Contains(ds, `host: "`+fullname()+`-clickhouse.spikehunt.svc"`) || !strings.Contains(ds, "port: 8123") {
		t.Fatalf("Grafana's data source does not name the store:\n%s", ds)
	}
	grafana, err := store.Open(ctx, "http://"+url.UserPassword(ro["username"], ro["password"]).String()+"@"+addr+"/spikehunt")
	if err != nil {
		t.Fatal(err)
	}
	defer grafana.Close()
	count := func(q string) int {
		tab, err := store.Select(ctx, grafana, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		n, _ := strconv.Atoi(tab.Rows[0][0])
		return n
	}
	if n := count("SELECT count() FROM requests"); n < 1000 {
		t.Errorf("%d requests stored, want the simulated fleet's", n)
	}
	if n := count("SELECT uniqExact(host) FROM spikes"); n < 15 {
		t.Errorf("spikes on %d hosts, want most of the 20 (each stalls every 15–20 minutes)", n)
	}
	if err := grafana.Exec(ctx, "INSERT INTO spikes (host) VALUES ('forged')"); err == nil || !strings.Contains(err.Error(), "ACCESS_DENIED") {
		t.Errorf("Grafana's user inserting: %v, want ACCESS_DENIED (the read-only role)", err)
	}

	// A later migration over HTTP, with the clients' DSN (the Secret's, as
	// `spikehunt migrate` run by hand or a Job would use it): the store is
	// up to date, so it needs no DDL, which the clients' user may not run.
	bin := filepath.Join(binaries(t), "spikehunt")
	dsn := strings.ReplaceAll(rw["dsn"], fullname()+"-clickhouse:8123", addr)
	out, err := exec.Command(bin, "migrate", "--dsn", dsn).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "up to date") {
		t.Errorf("spikehunt migrate over HTTP: %v\n%s", err, out)
	}
}

// servingAddress is 127.0.0.1 and the port serve-clickhouse says it
// serves on.
func servingAddress(t *testing.T, p *podProc) string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		sc := bufio.NewScanner(bytes.NewReader(p.out.Bytes()))
		for sc.Scan() {
			line := sc.Text()
			if i := strings.LastIndex(line, "http://"); i >= 0 && strings.HasPrefix(line, "serving") {
				_, port, err := net.SplitHostPort(strings.TrimPrefix(line[i:], "http://"))
				if err != nil {
					t.Fatal(err)
				}
				return "127.0.0.1:" + port
			}
		}
		if p.cmd.ProcessState != nil {
			break
		}
	}
	t.Fatalf("serve-clickhouse did not serve:\n%s", p.out)
	return ""
}

// waitCommitted waits until group has committed every message of topics.
func waitCommitted(t *testing.T, k *testenv.Kafka, group string, topics []string, p *podProc) {
	t.Helper()
	cl, err := k.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		ends, err1 := adm.ListEndOffsets(ctx, topics...)
		committed, err2 := adm.FetchOffsets(ctx, group)
		if err1 != nil || err2 != nil {
			continue
		}
		behind := int64(0)
		ends.Each(func(o kadm.ListedOffset) {
			c, ok := committed.Lookup(o.Topic, o.Partition)
			if !ok {
				behind += o.Offset
				return
			}
			behind += o.Offset - c.At
		})
		if behind == 0 {
			return
		}
	}
	t.Fatalf("the ingest did not commit %v in 2 minutes:\n%s", topics, p.out)
}

// secretBytes returns a rendered Secret's data, decoded.
func secretBytes(t testing.TB, m manifest, name string) map[string][]byte {
	t.Helper()
	data, _, err := unstructured.NestedStringMap(m.mustFind(t, "Secret", name).Object, "data")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for k, v := range data {
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			t.Fatal(err)
		}
		out[k] = b
	}
	return out
}
