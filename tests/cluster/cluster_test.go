//go:build linux

package cluster_test

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/spikehunt/spikehunt/tests/cluster"
)

func TestMain(m *testing.M) {
	// Every test's node enforces NetworkPolicy (networkpolicy_test.go).
	cluster.ConfigureShared(func(o *cluster.Options) { o.NetworkPolicy = true })
	code := m.Run()
	if err := cluster.StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// podAppImage is the image of testdata/podapp, a static Go program.
const podAppImage = "spikehunt.local/podapp:test"

var podApp struct {
	once sync.Once
	err  error
}

// node returns the shared node with the podapp image imported, and a
// namespace of the test's own, deleted at its end.
func node(t *testing.T) (*cluster.Cluster, kubernetes.Interface, string) {
	t.Helper()
	c := cluster.Shared(t)
	podApp.once.Do(func() { podApp.err = importPodApp(c) })
	if podApp.err != nil {
		t.Fatal(podApp.err)
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := strings.ToLower(strings.NewReplacer("_", "-", "/", "-").Replace(t.Name()))
	if len(ns) > 50 {
		ns = ns[:50]
	}
	ns = strings.Trim(ns, "-") + "-" + strconv.FormatInt(time.Now().UnixNano()%100000, 10)
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpNamespace(t, cs, ns)
		}
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	return c, cs, ns
}

func importPodApp(c *cluster.Cluster) error {
	dir, err := os.MkdirTemp("", "podapp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "podapp")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./testdata/podapp")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build testdata/podapp: %w: %s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	archive := filepath.Join(dir, "podapp.oci.tar")
	if err := cluster.WriteImageArchive(archive, cluster.Image{
		Name:       podAppImage,
		Files:      []cluster.ImageFile{{Path: "/podapp", Mode: 0o755, Data: data}},
		Entrypoint: []string{"/podapp"},
		User:       "65532:65532",
	}); err != nil {
		return err
	}
	return c.ImportImage(context.Background(), archive)
}

func dumpNamespace(t *testing.T, cs kubernetes.Interface, ns string) {
	ctx := context.Background()
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("list pods of %s: %v", ns, err)
		return
	}
	for _, p := range pods.Items {
		st, _ := json.MarshalIndent(p.Status, "", "  ")
		t.Logf("pod %s status:\n%s", p.Name, st)
		for _, ctr := range p.Spec.Containers {
			logs, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: ctr.Name}).DoRaw(ctx)
			t.Logf("pod %s container %s log (err %v):\n%s", p.Name, ctr.Name, err, logs)
		}
	}
	evs, _ := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if evs != nil {
		for _, e := range evs.Items {
			t.Logf("event %s %s: %s %s", e.InvolvedObject.Name, e.Type, e.Reason, e.Message)
		}
	}
}

const waitLimit = 3 * time.Minute

// waitPod waits until the pod satisfies done, and fails t with the pod's
// last status otherwise.
func waitPod(t *testing.T, cs kubernetes.Interface, ns, name, what string, done func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		p, err := cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && done(p) {
			return p
		}
		if err == nil && p.Status.Phase == corev1.PodFailed {
			t.Fatalf("pod %s failed while waiting for it to be %s", name, what)
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s is not %s after %s (last error %v)", name, what, waitLimit, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// unusedServiceIP is an address of the node's Service range that no
// Service has, from the top of the range down.
func unusedServiceIP(t *testing.T, c *cluster.Cluster, cs kubernetes.Interface) string {
	t.Helper()
	svcs, err := cs.CoreV1().Services("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, s := range svcs.Items {
		used[s.Spec.ClusterIP] = true
	}
	_, n, err := net.ParseCIDR(c.ServiceCIDR())
	if err != nil {
		t.Fatal(err)
	}
	ip := n.IP.To4()
	last := make(net.IP, 4)
	for i := range ip {
		last[i] = ip[i] | ^n.Mask[i]
	}
	for last[3]--; last[3] > ip[3]+1; last[3]-- { // below the broadcast address
		if !used[last.String()] {
			return last.String()
		}
	}
	t.Fatalf("every address of %s has a Service", c.ServiceCIDR())
	return ""
}

func runningAndReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitReadyEndpoint waits until the Service's EndpointSlices hold a ready
// endpoint: kube-proxy writes a Service's rules from them, not from the
// pod.
func waitReadyEndpoint(t *testing.T, cs kubernetes.Interface, ns, service string) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		slices, err := cs.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
		if err == nil {
			for _, s := range slices.Items {
				for _, e := range s.Endpoints {
					if e.Conditions.Ready != nil && *e.Conditions.Ready {
						return
					}
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("service %s has no ready endpoint after %s (last error %v)", service, waitLimit, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// logServiceRules logs the NAT rules that name the Service's address and
// the end of kube-proxy's log, for a test that could not reach it.
func logServiceRules(t *testing.T, c *cluster.Cluster, clusterIP string) {
	out, err := exec.Command("iptables-save", "-t", "nat").Output()
	if err != nil {
		t.Logf("iptables-save: %v", err)
	}
	var rules []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, clusterIP) || strings.HasPrefix(l, "-A KUBE-SEP-") {
			rules = append(rules, l)
		}
	}
	t.Logf("nat rules of %s and every service endpoint:\n%s", clusterIP, strings.Join(rules, "\n"))
	if b, err := os.ReadFile(filepath.Join(c.LogDir(), "kube-proxy.log")); err == nil {
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		t.Logf("kube-proxy log, its end:\n%s", b)
	}
}

func succeeded(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded }

func create(t *testing.T, cs kubernetes.Interface, p *corev1.Pod) {
	t.Helper()
	if _, err := cs.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// serverPod runs podapp serve on port 8080 with an HTTP readiness probe.
func serverPod(ns, name string) *corev1.Pod {
	nonRoot := true
	noEscalation := false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "server", Image: podAppImage, ImagePullPolicy: corev1.PullNever,
				Args:  []string{"serve", ":8080"},
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1,
				},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot: &nonRoot, AllowPrivilegeEscalation: &noEscalation,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

// clientPod runs podapp once with args; it Succeeds when the check passed.
func clientPod(ns, name string, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "client", Image: podAppImage, ImagePullPolicy: corev1.PullNever, Args: args}},
		},
	}
}

func TestAPodOfThePauseImageBuiltHereRuns(t *testing.T) {
	_, cs, ns := node(t)
	create(t, cs, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pause", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "pause", Image: cluster.PauseImage, ImagePullPolicy: corev1.PullNever,
		}}},
	})
	p := waitPod(t, cs, ns, "pause", "Running and Ready", runningAndReady)
	if p.Status.PodIP == "" {
		t.Errorf("pod has no IP: %+v", p.Status)
	}
}

func TestAPodOfALocallyBuiltImagePassesItsHTTPReadinessProbe(t *testing.T) {
	c, cs, ns := node(t)
	create(t, cs, serverPod(ns, "server"))
	p := waitPod(t, cs, ns, "server", "Running and Ready", runningAndReady)
	if p.Status.HostIP != c.NodeIP() {
		t.Errorf("pod's hostIP = %s, want the node IP %s", p.Status.HostIP, c.NodeIP())
	}
}

func TestAClusterIPServiceReachesItsPodFromAnotherPodAndFromTheHost(t *testing.T) {
	c, cs, ns := node(t)
	create(t, cs, serverPod(ns, "web"))
	svc, err := cs.CoreV1().Services(ns).Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitPod(t, cs, ns, "web", "Running and Ready", runningAndReady)
	waitReadyEndpoint(t, cs, ns, "web")
	url := "http://" + net.JoinHostPort(svc.Spec.ClusterIP, "80") + "/"
	t.Cleanup(func() {
		if t.Failed() {
			logServiceRules(t, c, svc.Spec.ClusterIP)
		}
	})

	// The service's pod answers with its hostname, the pod's name.
	create(t, cs, clientPod(ns, "client", "get", url, "podapp web"))
	waitPod(t, cs, ns, "client", "Succeeded (GET "+url+" from a pod)", succeeded)

	// An address of the Service range that no Service has is refused at
	// once, on this host, rather than leaving by the default route.
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(unusedServiceIP(t, c, cs), "80"), 5*time.Second)
	if err == nil {
		conn.Close()
		t.Error("a ClusterIP no Service has answered")
	} else if !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Errorf("dial a ClusterIP no Service has: %v, want no route to host (the node's reject of untranslated Service traffic)", err)
	}

	getFromHost(t, url, "podapp web")
}

// getFromHost GETs url from the test's process until it answers 200 with
// want, failing t after waitLimit.
func getFromHost(t *testing.T, url, want string) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	hc := &http.Client{Timeout: 5 * time.Second}
	for {
		resp, err := hc.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && string(body) == want {
				return
			}
			err = fmt.Errorf("%s %q", resp.Status, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s from the host: %v", url, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func TestAPodReachesTheAPIServerThroughTheKubernetesServiceWithItsServiceAccountToken(t *testing.T) {
	_, cs, ns := node(t)
	create(t, cs, clientPod(ns, "whoami", "whoami-api", "system:serviceaccount:"+ns+":default"))
	waitPod(t, cs, ns, "whoami", "Succeeded", succeeded)
}

func TestAPodReachesATCPServerOnTheHostAtTheNodeIP(t *testing.T) {
	c, cs, ns := node(t)
	l, err := net.Listen("tcp4", net.JoinHostPort(c.NodeIP(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	token := "hello-from-the-host-" + ns
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(conn, token)
			conn.Close()
		}
	}()
	create(t, cs, clientPod(ns, "dial", "dial", l.Addr().String(), token))
	waitPod(t, cs, ns, "dial", "Succeeded (dial "+l.Addr().String()+")", succeeded)
}

func TestAPrivilegedDaemonSetPodSharesTheHostsNetworkAndPIDNamespaces(t *testing.T) {
	_, cs, ns := node(t)
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	privileged := true
	var root int64
	labels := map[string]string{"app": "agent"}
	ds, err := cs.AppsV1().DaemonSets(ns).Create(context.Background(), &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork: true, HostPID: true,
					Containers: []corev1.Container{{
						Name: "agent", Image: podAppImage, ImagePullPolicy: corev1.PullNever,
						Args: []string{"serve", "127.0.0.1:" + strconv.Itoa(port)},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "127.0.0.1", Path: "/healthz", Port: intstr.FromInt(port)}},
							PeriodSeconds: 1,
						},
						SecurityContext: &corev1.SecurityContext{Privileged: &privileged, RunAsUser: &root},
					}},
				},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitLimit)
	for {
		got, err := cs.AppsV1().DaemonSets(ns).Get(context.Background(), ds.Name, metav1.GetOptions{})
		if err == nil && got.Status.DesiredNumberScheduled == 1 && got.Status.NumberReady == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("DaemonSet agent has no Ready pod after %s: %+v (%v)", waitLimit, got.Status, err)
		}
		time.Sleep(500 * time.Millisecond)
	}

	// The pod answers on the host's loopback (host network) and sees the
	// host's PID 1 (host PID namespace) with every capability (privileged).
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/whoami")
	if err != nil {
		t.Fatalf("the hostNetwork pod does not answer on the host's 127.0.0.1:%d: %v", port, err)
	}
	defer resp.Body.Close()
	var who struct{ Pid1, CapEff, Hostname string }
	if err := json.NewDecoder(resp.Body).Decode(&who); err != nil {
		t.Fatal(err)
	}
	hostPid1, _ := os.ReadFile("/proc/1/comm")
	if who.Pid1 != strings.TrimSpace(string(hostPid1)) {
		t.Errorf("the pod's PID 1 is %q, the host's is %q: not in the host PID namespace", who.Pid1, strings.TrimSpace(string(hostPid1)))
	}
	hostname, _ := os.Hostname()
	if who.Hostname != hostname {
		t.Errorf("the pod's hostname is %q, the host's is %q: not on the host network", who.Hostname, hostname)
	}
	if want := capEff(t); who.CapEff != want {
		t.Errorf("the privileged pod's CapEff is %s, the root test process has %s", who.CapEff, want)
	}
}

func capEff(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return ""
}

func TestPodsResolveServiceNamesThroughClusterDNSAlsoOnTheHostNetwork(t *testing.T) {
	_, cs, ns := node(t)
	create(t, cs, serverPod(ns, "named"))
	if _, err := cs.CoreV1().Services(ns).Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "named", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "named"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, cs, ns, "named", "Running and Ready", runningAndReady)

	// The short name through the pod's search path, and the chart's form
	// <name>.<namespace>.svc from a hostNetwork pod with
	// ClusterFirstWithHostNet, as the agent resolves its gateway.
	create(t, cs, clientPod(ns, "short", "get", "http://named/", "podapp named"))
	host := clientPod(ns, "hostnet", "get", "http://named."+ns+".svc/", "podapp named")
	host.Spec.HostNetwork = true
	host.Spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
	create(t, cs, host)
	waitPod(t, cs, ns, "short", "Succeeded (GET http://named/)", succeeded)
	waitPod(t, cs, ns, "hostnet", "Succeeded (GET http://named."+ns+".svc/ from the host network)", succeeded)
}

func TestAnArchiveThatNamesItsImageOnlyByATagIsRefused(t *testing.T) {
	c, _, _ := node(t)
	dir := t.TempDir()
	named := filepath.Join(dir, "named.tar")
	if err := cluster.WriteImageArchive(named, cluster.Image{Name: "spikehunt.local/tagonly:1", Files: []cluster.ImageFile{{Path: "/x", Mode: 0o644, Data: []byte("x")}}}); err != nil {
		t.Fatal(err)
	}
	// The same archive as `skopeo copy ... oci-archive:F:1` writes it: the
	// manifest's ref.name is the tag alone.
	tagOnly := filepath.Join(dir, "tagonly.tar")
	rewriteIndex(t, named, tagOnly, func(index map[string]any) {
		m := index["manifests"].([]any)[0].(map[string]any)
		m["annotations"] = map[string]any{"org.opencontainers.image.ref.name": "1"}
	})
	err := c.ImportImage(context.Background(), tagOnly)
	if err == nil || !strings.Contains(err.Error(), "io.containerd.image.name") {
		t.Fatalf("ImportImage(a tag-only archive) = %v, want an error naming the annotation to set", err)
	}
	if err := c.ImportImage(context.Background(), named); err != nil {
		t.Fatalf("ImportImage(the named archive): %v", err)
	}
}

// rewriteIndex copies the OCI archive src to dst with index.json changed
// by edit.
func rewriteIndex(t *testing.T, src, dst string, edit func(map[string]any)) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	tr, tw := tar.NewReader(in), tar.NewWriter(out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "index.json" {
			var index map[string]any
			if err := json.Unmarshal(data, &index); err != nil {
				t.Fatal(err)
			}
			edit(index)
			if data, err = json.Marshal(index); err != nil {
				t.Fatal(err)
			}
			h.Size = int64(len(data))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestAClaimWithoutAStorageClassBindsToAVolumeANonRootPodWrites(t *testing.T) {
	c, cs, ns := node(t)
	ctx := context.Background()
	if err := c.AddVolumes(ctx, 1, "1Gi"); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The pod, as uid 65532, serves on a unix socket in the volume: the
	// socket in the bound volume's folder on the host shows that the claim
	// got that volume and that a non-root pod can write to it.
	p := serverPod(ns, "writer")
	p.Spec.Containers[0].Args = []string{"serve", "unix:/data/sock"}
	p.Spec.Containers[0].ReadinessProbe = nil
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
	create(t, cs, p)
	waitPod(t, cs, ns, "writer", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	pvc, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != cluster.StorageClass || pvc.Status.Phase != corev1.ClaimBound {
		t.Fatalf("claim: class %v, phase %s; want %s, Bound", pvc.Spec.StorageClassName, pvc.Status.Phase, cluster.StorageClass)
	}
	sock := filepath.Join(c.Dir(), "volumes", pvc.Spec.VolumeName, "sock")
	deadline := time.Now().Add(waitLimit)
	for {
		fi, err := os.Stat(sock)
		if err == nil && fi.Mode()&os.ModeSocket != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pod (uid 65532) made no socket in its volume: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestAPodWithOnlyThePerfBackendsCapabilitiesOpensASystemWidePerfEvent runs
// a pod the way the chart runs the agent with the perf backend: host PID
// and network, uid 0, every capability dropped and only
// spikehunt.agent.capabilities' perf set added (helm/spikehunt/templates/
// _helpers.tpl), containerd's default seccomp profile.
func TestAPodWithOnlyThePerfBackendsCapabilitiesOpensASystemWidePerfEvent(t *testing.T) {
	_, cs, ns := node(t)
	const (
		capIPCLock   = 14
		capSysPtrace = 19
		capSyslog    = 34
		capPerfmon   = 38
	)
	want := fmt.Sprintf("%016x", uint64(1)<<capIPCLock|1<<capSysPtrace|1<<capSyslog|1<<capPerfmon)
	var root int64
	readOnly, noRootCheck := true, false
	p := clientPod(ns, "perf", "perf-cpu0", want)
	p.Spec.HostPID, p.Spec.HostNetwork = true, true
	p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{
		RunAsUser: &root, RunAsNonRoot: &noRootCheck, ReadOnlyRootFilesystem: &readOnly,
		Capabilities: &corev1.Capabilities{
			Drop: []corev1.Capability{"ALL"},
			Add:  []corev1.Capability{"IPC_LOCK", "PERFMON", "SYSLOG", "SYS_PTRACE"},
		},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	create(t, cs, p)
	waitPod(t, cs, ns, "perf", "Succeeded (perf_event_open with CapEff "+want+")", succeeded)
}
