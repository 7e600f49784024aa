//go:build linux

package e2ecluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/tests/cluster"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

const (
	release   = "spikehunt"
	namespace = "spikehunt"
	hwClass   = "gen5"
	// storePassword is the embedded store's read-write user's, given so
	// that the test can read the store as the chart's clients do.
	storePassword = "e2e-store-password"
)

// env is the test's cluster with the release installed.
type env struct {
	cluster    *cluster.Cluster
	kubeconfig string
	client     client.Client
	clientset  *kubernetes.Clientset
	node       string             // the first node's, where the control plane runs
	nodes      []cluster.NodeInfo // every node, the first's first
	kafka      *testenv.Kafka
	s3         *testenv.S3Server
	shopImage  string
	storeDSN   string
}

func setUp(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	images := os.Getenv("SPIKEHUNT_IMAGES_DIR")
	if images == "" {
		t.Fatal("SPIKEHUNT_IMAGES_DIR is not set: run through `make e2e-cluster` or `make test`, which build the images first")
	}

	c := cluster.Shared(t)
	e := &env{cluster: c, kubeconfig: c.Kubeconfig(), node: c.NodeName(), nodes: c.Nodes()}
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	s, err := testenv.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if e.client, err = client.New(cfg, client.Options{Scheme: s}); err != nil {
		t.Fatal(err)
	}
	if e.clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			e.dump(t)
		}
	})

	for _, name := range []string{"spikehunt", "spikehunt-agent", "spikehunt-operator"} {
		if err := c.ImportImage(ctx, filepath.Join(images, name+".oci.tar")); err != nil {
			t.Fatal(err)
		}
	}
	e.shopImage = buildShopImage(t, c)
	buildCommandImage(t, c, "probe", probeImageName)
	buildGatewayImage(t, c)

	// Kafka and S3 on the host, on the node's address.
	if e.kafka, err = testenv.StartKafka(testenv.KafkaOptions{Host: c.NodeIP()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() { // before the broker stops: the dump's other parts come later
			e.dumpAlertsGroup(t)
		}
		e.kafka.Stop()
	})
	for _, topic := range []string{"otlp_spans", "otlp_metrics", "spikehunt.alerts"} {
		if err := e.kafka.CreateTopic(ctx, topic, 1); err != nil {
			t.Fatal(err)
		}
	}
	e.s3 = testenv.S3At(t, c.NodeIP())
	// The embedded store's claim binds to a hostPath volume of the node.
	if err := c.AddVolumes(ctx, 1, "2Gi"); err != nil {
		t.Fatal(err)
	}

	// The nodes' hardware class, which the agent reads from its label.
	for _, n := range e.nodes {
		var node corev1.Node
		if err := e.client.Get(ctx, client.ObjectKey{Name: n.Name}, &node); err != nil {
			t.Fatal(err)
		}
		node.Labels["spikehunt.io/hw-class"] = hwClass
		if err := e.client.Update(ctx, &node); err != nil {
			t.Fatal(err)
		}
	}

	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(e.values()), 0o600); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	webhookTLS := e.createWebhookTLSSecretWhenTheNamespaceExists(t)
	e.runREADMEInstall(t, values)
	if err := <-webhookTLS; err != nil {
		t.Fatalf("the webhook's TLS Secret: %v", err)
	}
	t.Logf("the README's install block, helm install --wait: every workload Ready after %v", time.Since(began).Round(time.Second))
	e.checkEveryWorkloadReady(t)

	// The store, as the chart's clients reach it: its Service, with the
	// read-write user.
	var svc corev1.Service
	if err := e.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: release + "-clickhouse"}, &svc); err != nil {
		t.Fatal(err)
	}
	e.storeDSN = fmt.Sprintf("http://default:%s@%s:8123/spikehunt", storePassword, svc.Spec.ClusterIP)
	return e
}

// values are the release's values: the local images, never pulled (the
// gateway's is pipelines/services/otel's Collector build); the host's Kafka and S3;
// the embedded store on a volume of the node; a detector pass every few
// seconds so that the test takes minutes, not hours. With more nodes than
// one, detect runs on the first (with the store, whose volume is there).
func (e *env) values() string {
	var cidrs []string
	for _, n := range e.nodes {
		cidrs = append(cidrs, strconv.Quote(n.PodCIDR))
	}
	detectOn := "{}"
	if len(e.nodes) > 1 {
		detectOn = fmt.Sprintf("{kubernetes.io/hostname: %q}", e.node)
	}
	return fmt.Sprintf(`image:
  pullPolicy: Never
kafka:
  brokers: [%q]
s3:
  endpoint: %q
  region: %q
  bucket: %q
  insecure: true
  accessKeyId: %q
  secretAccessKey: %q
detect:
  every: 5s
  since: 1h
  nodeSelector: %s
clickhouse:
  password: %q
  embedded:
    persistence:
      size: 2Gi
agent:
  trigger:
    cidrs: [%s]
  # Narrowed as the operator's below; the app's pods have the label. The
  # agent is on the host's network, where no NetworkPolicy applies: the
  # NetworkPolicy check shows a pod without it getting through.
  networkPolicy:
    intakeFrom:
      - namespaceSelector: {}
        podSelector:
          matchLabels: {%s: "yes"}
operator:
  # Debug (4 shows the intake's slog debug lines too): an alert that arms
  # nothing says why only at this level, and a failed run dumps the
  # operator's log.
  extraArgs: ["--zap-log-level=4"]
  # The webhook and the report server on, each NetworkPolicy narrowed to
  # peers with a label of the test's: the NetworkPolicy check
  # (networkpolicy_test.go) sends from pods with and without it.
  webhook:
    enabled: true
    tlsSecretName: %q
    grafana:
      hmacSecret: e2e-grafana-hmac-secret
    alertmanager:
      token: e2e-alertmanager-token
  reportServer:
    users:
      - name: e2e
        passwordHash: sha256:%s
        namespaces: ["*"]
  networkPolicy:
    webhookFrom:
      - namespaceSelector: {}
        podSelector:
          matchLabels: {%s: "yes"}
    reportFrom:
      - namespaceSelector: {}
        podSelector:
          matchLabels: {%s: "yes"}
otelGateway:
  replicas: 1
  image:
    registry: spikehunt.local
    repository: e2e-otelcol
    tag: "0.155.0"
    pullPolicy: Never
`, e.kafka.Brokers()[0], e.s3.Endpoint, e.s3.Region, e.s3.Bucket, e.s3.AccessKey, e.s3.SecretKey, detectOn, storePassword, strings.Join(cidrs, ", "),
		sendsRequestsLabel, webhookTLSSecret, strings.Repeat("ab", 32), sendsAlertsLabel, readsReportsLabel)
}

// checkEveryWorkloadReady asserts what helm --wait implies, by name: each
// Deployment, DaemonSet and StatefulSet of the release has every replica
// ready.
func (e *env) checkEveryWorkloadReady(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	apps := e.clientset.AppsV1()
	var names []string
	deps, err := apps.Deployments(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		if d.Status.ReadyReplicas != *d.Spec.Replicas {
			t.Errorf("Deployment %s: %d of %d replicas ready", d.Name, d.Status.ReadyReplicas, *d.Spec.Replicas)
		}
		names = append(names, "deployment/"+d.Name)
	}
	dss, err := apps.DaemonSets(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dss.Items {
		if d.Status.NumberReady != d.Status.DesiredNumberScheduled || d.Status.NumberReady == 0 {
			t.Errorf("DaemonSet %s: %d of %d pods ready", d.Name, d.Status.NumberReady, d.Status.DesiredNumberScheduled)
		}
		names = append(names, "daemonset/"+d.Name)
	}
	sts, err := apps.StatefulSets(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sts.Items {
		if s.Status.ReadyReplicas != *s.Spec.Replicas {
			t.Errorf("StatefulSet %s: %d of %d replicas ready", s.Name, s.Status.ReadyReplicas, *s.Spec.Replicas)
		}
		names = append(names, "statefulset/"+s.Name)
	}
	// Ready at once, not after a crash loop: the store's clients wait for
	// it (--store-wait) rather than exit while it boots.
	pods, err := e.clientset.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount != 0 {
				t.Errorf("pod %s container %s restarted %d times (last: %+v)", p.Name, cs.Name, cs.RestartCount, cs.LastTerminationState.Terminated)
			}
		}
	}
	t.Logf("ready: %s", strings.Join(names, ", "))
}

// spikesOverlapping are the ids of host's live spike windows that share
// an instant with [from, to], read from the release's store.
func (e *env) spikesOverlapping(t *testing.T, host string, from, to time.Time) []string {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, e.storeDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tab, err := store.Select(ctx, st, fmt.Sprintf(`SELECT spike_id FROM spikes FINAL
WHERE host = %s AND is_deleted = 0 AND window_start < fromUnixTimestamp64Milli(%d) AND window_end > fromUnixTimestamp64Milli(%d)`,
		store.QuoteString(host), to.UnixMilli(), from.UnixMilli()))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range tab.Rows {
		ids = append(ids, r[0])
	}
	return ids
}

// dump logs every pod's state and its containers' last lines, for a
// failed run.
func (e *env) dump(t *testing.T) {
	ctx := context.Background()
	pods, err := e.clientset.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("dump: %v", err)
		return
	}
	for _, p := range pods.Items {
		t.Logf("pod %s/%s: %s ready=%v", p.Namespace, p.Name, p.Status.Phase, podReady(&p))
		for _, cs := range p.Status.ContainerStatuses {
			t.Logf("  container %s: ready=%v restarts=%d state=%+v last=%+v", cs.Name, cs.Ready, cs.RestartCount, cs.State, cs.LastTerminationState)
			tail := int64(40)
			b, err := e.clientset.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: cs.Name, TailLines: &tail}).DoRaw(ctx)
			if err != nil {
				t.Logf("  logs: %v", err)
				continue
			}
			t.Logf("  logs:\n%s", b)
			// The tail of a busy pod (detect prints a line a pass) hides
			// what happened early: its lines about alerts, captures,
			// intake, warnings and errors from the whole log, the first 60.
			if full, err := e.clientset.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: cs.Name}).DoRaw(ctx); err == nil {
				var keep []string
				for _, line := range strings.Split(string(full), "\n") {
					l := strings.ToLower(line)
					if len(keep) < 60 && (strings.Contains(l, "alert") || strings.Contains(l, "capture") || strings.Contains(l, "intake") ||
						strings.Contains(l, "warn") || strings.Contains(l, "error") || strings.Contains(l, "new or changed")) && !strings.Contains(l, "(0 new or changed") {
						keep = append(keep, line)
					}
				}
				if len(keep) > 0 {
					t.Logf("  lines about alerts, captures and errors:\n%s", strings.Join(keep, "\n"))
				}
			}
		}
	}
	evs, err := e.clientset.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, ev := range evs.Items {
			if ev.Type != corev1.EventTypeNormal {
				t.Logf("event %s/%s %s: %s", ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, ev.Message)
			}
		}
	}
	// The operator's alert counters (received, dropped by reason), beside
	// its debug lines on each alert.
	for _, p := range pods.Items {
		if !strings.Contains(p.Name, "-operator-") {
			continue
		}
		b, err := e.clientset.CoreV1().Pods(p.Namespace).ProxyGet("http", p.Name, "8080", "metrics", nil).DoRaw(ctx)
		if err != nil {
			t.Logf("operator %s metrics: %v", p.Name, err)
			continue
		}
		var keep []string
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "alert") && !strings.HasPrefix(line, "#") {
				keep = append(keep, line)
			}
		}
		t.Logf("operator %s alert metrics:\n%s", p.Name, strings.Join(keep, "\n"))
	}
	if stoppedAt != "" {
		t.Logf("the test failed waiting for %s", stoppedAt)
	}
}

// dumpAlertsGroup logs the alerts topic and the operator's consumer group
// as the broker sees them: the topic's end offset, the group's members and
// what each owns, and the offset it committed. An alert the operator never
// consumed shows here as an end offset past the committed one.
func (e *env) dumpAlertsGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cl, err := e.kafka.Client()
	if err != nil {
		t.Logf("alerts group: %v", err)
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	const topic, group = "spikehunt.alerts", "spikehunt-operator-alerts"
	if ends, err := adm.ListEndOffsets(ctx, topic); err != nil {
		t.Logf("alerts topic end offsets: %v", err)
	} else {
		ends.Each(func(o kadm.ListedOffset) {
			t.Logf("alerts topic %s[%d]: end offset %d (err %v)", o.Topic, o.Partition, o.Offset, o.Err)
		})
	}
	if gs, err := adm.DescribeGroups(ctx, group); err != nil {
		t.Logf("alerts group: %v", err)
	} else {
		for _, g := range gs {
			t.Logf("alerts group %s: state %s, %d members, err %v", g.Group, g.State, len(g.Members), g.Err)
			for _, m := range g.Members {
				owns := "nothing"
				if a, ok := m.Assigned.AsConsumer(); ok && len(a.Topics) > 0 {
					owns = fmt.Sprint(a.Topics)
				}
				t.Logf("  member %s (%s@%s) owns %s", m.MemberID, m.ClientID, m.ClientHost, owns)
			}
		}
	}
	if offs, err := adm.FetchOffsets(ctx, group); err != nil {
		t.Logf("alerts group committed offsets: %v", err)
	} else {
		offs.Each(func(o kadm.OffsetResponse) {
			t.Logf("alerts group committed %s[%d] = %d (err %v)", o.Topic, o.Partition, o.At, o.Err)
		})
	}
}
