//go:build linux

package e2ecluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/tests/cluster"
)

// volumeAffinityRefusal is the scheduler's reason (1.33) for a node that
// a pod's PersistentVolume is not on.
const volumeAffinityRefusal = "didn't match PersistentVolume's node affinity"

// operatorLease is the Lease the operator's replicas compete for
// (operator/cmd: leaderElectionID), in the release's namespace.
const operatorLease = "operator.spikehunt.io"

// The chart across two nodes (make e2e-cluster-2), every part in pods of
// the chart's images, the second node in its own network and mount
// namespaces with its own containerd and kubelet:
//
//  1. The agent DaemonSet runs on both nodes, each agent with its own
//     spool; the operator's two replicas are on different nodes; detect
//     and the store run on the first.
//  2. The app runs on the second node and stalls. The detector, on the
//     first, alerts; the operator's leader, on the first, arms a Capture
//     on the second node (the policy selects both: the alert's host picks
//     it), and the second node's agent arms it.
//  3. Mid-alert, as soon as the alert's Capture exists, the leader pod is
//     killed (deleted with no grace). The replica on the second node takes
//     the Lease and finishes the alert: the app's next stall fires the
//     capture, and the new leader indexes it. Every Capture of the alert
//     ends Indexed or Failed with a reason, one per node at most.
//  4. kubectl drain of the second node: its agent stays (a DaemonSet pod),
//     the same pod with its spool, and its Capture stays Indexed, as the
//     chart's README says ("Draining a node").
//  5. The store's node cordoned and its pod deleted: the pod stays Pending
//     (its local volume's node affinity admits no other node),
//     as the chart's README says, and comes back when the node returns.
func TestTheChartAcrossTwoNodesArmsOnTheAlertedNodeAndSurvivesItsLeadersDeath(t *testing.T) {
	if !twoNodes {
		// Opt-in, as make causes and make soak are: not a missing feature.
		t.Log(cluster.TwoNodesEnv + "=1 runs the two-node test (make e2e-cluster-2)")
		return
	}
	began := time.Now()
	ctx := context.Background()
	e := setUp(t)
	if len(e.nodes) != 2 {
		t.Fatalf("nodes %+v, want two", e.nodes)
	}
	a, b := e.nodes[0].Name, e.nodes[1].Name
	t.Logf("two nodes (%s, %s), images, Kafka, s3proxy and the release ready after %v", a, b, time.Since(began).Round(time.Second))

	// 1. Where everything runs.
	agents := e.podsOf(t, "agent")
	if got := nodesOf(agents); !slices.Equal(got, []string{a, b}) {
		t.Fatalf("agent pods on %v, want one on each of %s and %s", got, a, b)
	}
	ds, err := e.clientset.AppsV1().DaemonSets(namespace).Get(ctx, release+"-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Status.DesiredNumberScheduled != 2 || ds.Status.NumberReady != 2 {
		t.Fatalf("agent DaemonSet: %d desired, %d ready; want 2 and 2", ds.Status.DesiredNumberScheduled, ds.Status.NumberReady)
	}
	// Each agent's spool is its node's: the second node's is in its own
	// folder (NodeOptions.Private), where the host's path is bind-mounted.
	spoolB := filepath.Join(e.cluster.Dir(), "nodes", b, "private", "var", "lib", "spikehunt", "spool")
	if _, err := os.Stat(filepath.Join(spoolB, "lock")); err != nil {
		t.Fatalf("the second node's agent spool: %v", err)
	}
	operators := e.podsOf(t, "operator")
	if got := nodesOf(operators); !slices.Equal(got, []string{a, b}) {
		t.Fatalf("operator pods on %v, want one on each node (the chart's anti-affinity for replicas: 2)", got)
	}
	if got := nodesOf(e.podsOf(t, "detect")); !slices.Equal(got, []string{a}) {
		t.Fatalf("detect pods on %v, want %s", got, a)
	}
	// The leader on the first node, so that the alert on the second is
	// armed from the first. A leader elected on the second is killed with
	// the second node cordoned (else its replacement, back there, may win
	// the Lease), then the standby is sent back to the second node.
	leader := e.waitLeader(t, "")
	if leader.Spec.NodeName != a {
		t.Logf("the leader %s is on %s: killing it so that a replica on %s leads", leader.Name, leader.Spec.NodeName, a)
		e.kubectl(t, "cordon", b)
		e.kill(t, leader)
		leader = e.waitLeader(t, leader.Name)
		e.kubectl(t, "uncordon", b)
		if leader.Spec.NodeName != a {
			t.Fatalf("after the kill the leader %s is on %s, want %s", leader.Name, leader.Spec.NodeName, a)
		}
		for _, p := range e.podsOf(t, "operator") {
			if p.Name != leader.Name {
				if err := e.clientset.CoreV1().Pods(namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		eventually(t, 2*time.Minute, "the operator's standby back on "+b, func() error {
			ops := e.podsOf(t, "operator")
			if got := nodesOf(ops); !slices.Equal(got, []string{a, b}) || !podReady(ops[0]) || !podReady(ops[1]) {
				return fmt.Errorf("operator pods on %v", got)
			}
			return nil
		})
	}
	t.Logf("operator leader %s on %s", leader.Name, a)

	// 2. The app on the second node; a policy over both nodes.
	const (
		service = "shop"
		pre     = 3 * time.Second
		post    = time.Second
		trigger = 500 * time.Millisecond
	)
	shop := e.startShop(t, service, b)
	// The policy selects both nodes: the alert's host picks the one armed.
	pol := stallsPolicy(service, map[string]string{"spikehunt.io/hw-class": hwClass}, pre, post, trigger)
	if err := e.client.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Second) // the host's typical latency
	stall1From, stall1To := shop.stall(t)
	t.Logf("stall 1 on %s [%s, %s]", b, stamp(stall1From), stamp(stall1To))
	var c v1alpha1.Capture
	eventuallyEvery(t, 5*time.Minute, 100*time.Millisecond, "the detect pod alerts and the operator's leader arms a Capture", func() error {
		var caps v1alpha1.CaptureList
		if err := e.client.List(ctx, &caps, client.InNamespace(shopNamespace)); err != nil {
			return err
		}
		if len(caps.Items) == 0 {
			return fmt.Errorf("no Capture in %s", shopNamespace)
		}
		c = caps.Items[0]
		return nil
	})
	if s := c.Spec; s.NodeName != b || s.Reason != v1alpha1.ReasonAlert || s.AlertID == "" {
		t.Fatalf("capture %s: spec %+v; want node %s (the alert's host), reason alert, an alert id", c.Name, s, b)
	}
	alertID := c.Spec.AlertID
	t.Logf("capture %s on %s for alert %s, phase %q, %v in", c.Name, b, alertID, c.Status.Phase, time.Since(began).Round(time.Second))

	// 3. Mid-alert: the leader dies.
	if c.Status.Phase.Final() {
		t.Fatalf("capture %s is already %s: not mid-alert", c.Name, c.Status.Phase)
	}
	// A crash, not a shutdown: SIGKILL, so the Lease is not handed over
	// and the standby takes it only once it expires. The first node is
	// cordoned meanwhile, else the dead pod's replacement, there, could
	// win the Lease before the standby on the second node.
	e.kubectl(t, "cordon", a)
	killedAt := time.Now()
	e.crash(t, leader)
	newLeader := e.waitLeader(t, leader.Name)
	e.kubectl(t, "uncordon", a)
	if newLeader.Spec.NodeName != b {
		t.Fatalf("the new leader %s is on %s, want the replica on %s", newLeader.Name, newLeader.Spec.NodeName, b)
	}
	t.Logf("leader %s killed (SIGKILL); %s on %s took the Lease %v later", leader.Name, newLeader.Name, b, time.Since(killedAt).Round(time.Second))

	key := client.ObjectKeyFromObject(&c)
	eventually(t, 2*time.Minute, "the second node's agent arms perf", e.reached(t, key, v1alpha1.PhaseArmed, &c))
	agentB, agentA := podOn(agents, b), podOn(agents, a)
	armedLine := "capture armed for its Capture"
	eventually(t, 30*time.Second, "the second node's agent logs the arming", func() error {
		if l := e.logLines(t, agentB, c.Name); !slices.ContainsFunc(l, func(s string) bool { return strings.Contains(s, armedLine) }) {
			return fmt.Errorf("agent %s on %s logged no %q for %s", agentB.Name, b, armedLine, c.Name)
		}
		return nil
	})
	if l := e.logLines(t, agentA, c.Name); len(l) > 0 {
		t.Errorf("the first node's agent %s names capture %s:\n%s", agentA.Name, c.Name, strings.Join(l, "\n"))
	}

	time.Sleep(pre + 2*time.Second)
	stall2From, stall2To := shop.stall(t)
	t.Logf("stall 2 on %s [%s, %s]", b, stamp(stall2From), stamp(stall2To))
	eventually(t, 4*time.Minute, "the capture is fired and uploaded", e.reached(t, key, v1alpha1.PhaseUploaded, &c))
	if c.Status.FiredBy != v1alpha1.FiredByLatency || c.Status.Artifact == nil {
		t.Fatalf("uploaded capture: firedBy %q, artifact %+v", c.Status.FiredBy, c.Status.Artifact)
	}
	eventually(t, 3*time.Minute, "the new leader indexes the capture against stall 2's spike", e.reached(t, key, v1alpha1.PhaseIndexed, &c))
	spikes := e.spikesOverlapping(t, b, stall2From, stall2To)
	if !slices.ContainsFunc(c.Status.SpikeIDs, func(id string) bool { return slices.Contains(spikes, id) }) {
		t.Errorf("status.spikeIDs = %v, want one of %s's spikes over stall 2 %v", c.Status.SpikeIDs, b, spikes)
	}
	// Every Capture of the alert: final, Indexed or Failed with a reason,
	// none lost (at least the one above), none doubled (one a node).
	var all []v1alpha1.Capture
	eventually(t, 2*time.Minute, "every Capture of the alert ends", func() error {
		var caps v1alpha1.CaptureList
		if err := e.client.List(ctx, &caps); err != nil {
			return err
		}
		all = all[:0]
		for _, x := range caps.Items {
			if x.Spec.AlertID == alertID {
				all = append(all, x)
				if !x.Status.Phase.Final() {
					return fmt.Errorf("capture %s is %s", x.Name, x.Status.Phase)
				}
			}
		}
		return nil
	})
	perNode := map[string][]string{}
	for _, x := range all {
		perNode[x.Spec.NodeName] = append(perNode[x.Spec.NodeName], x.Name)
		switch {
		case x.Status.Phase == v1alpha1.PhaseIndexed:
		case x.Status.Phase == v1alpha1.PhaseFailed && x.Status.Message != "":
		default:
			t.Errorf("capture %s of alert %s ended %s (%q), want Indexed or Failed with a reason", x.Name, alertID, x.Status.Phase, x.Status.Message)
		}
	}
	for node, names := range perNode {
		if len(names) > 1 {
			t.Errorf("alert %s has %d Captures on %s: %v", alertID, len(names), node, names)
		}
	}
	if len(perNode[b]) != 1 {
		t.Errorf("alert %s: Captures per node %v, want one on %s", alertID, perNode, b)
	}
	t.Logf("alert %s: %d Capture(s) %v, indexed by the new leader; %v in", alertID, len(all), perNode, time.Since(began).Round(time.Second))

	// 4. Drain the second node.
	e.checkDrain(t, b, agentB, c.Name, spoolB)
	// 5. The store's node goes away.
	e.checkStoreStaysWithItsVolume(t, a)
	t.Logf("the two-node run took %v", time.Since(began).Round(time.Second))
}

// checkDrain drains node and checks what the chart's README says of it:
// the agent, a DaemonSet pod, stays, with its spool, and keeps the node's
// Captures as they are; the other pods leave; uncordon brings the node back.
func (e *env) checkDrain(t *testing.T, node string, agent *corev1.Pod, capture, spool string) {
	t.Helper()
	ctx := context.Background()
	before, err := os.ReadDir(spool)
	if err != nil {
		t.Fatal(err)
	}
	out := e.kubectl(t, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=3m")
	t.Logf("kubectl drain %s:\n%s", node, out)
	defer e.kubectl(t, "uncordon", node)
	var p corev1.Pod
	if err := e.client.Get(ctx, client.ObjectKeyFromObject(agent), &p); err != nil {
		t.Fatalf("the drained node's agent %s: %v", agent.Name, err)
	}
	if p.UID != agent.UID || p.DeletionTimestamp != nil || !podReady(&p) {
		t.Errorf("the drained node's agent: uid %s (was %s), deleting %v, ready %v; want the same pod, Ready", p.UID, agent.UID, p.DeletionTimestamp, podReady(&p))
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.RestartCount != 0 {
			t.Errorf("the drained node's agent container %s restarted %d times", cs.Name, cs.RestartCount)
		}
	}
	after, err := os.ReadDir(spool)
	if err != nil {
		t.Fatalf("the drained node's spool: %v", err)
	}
	if len(after) < len(before) {
		t.Errorf("the drained node's spool had %d entries, now %d", len(before), len(after))
	}
	var c v1alpha1.Capture
	if err := e.client.Get(ctx, types.NamespacedName{Namespace: shopNamespace, Name: capture}, &c); err != nil {
		t.Fatal(err)
	}
	if c.Status.Phase != v1alpha1.PhaseIndexed {
		t.Errorf("capture %s on the drained node is %s, want it left Indexed", capture, c.Status.Phase)
	}
	// Only DaemonSet pods are left on the node; the operator's replica
	// went to the other node, and the release is whole again.
	pods, err := e.clientset.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && (len(p.OwnerReferences) == 0 || p.OwnerReferences[0].Kind != "DaemonSet") {
			t.Errorf("pod %s/%s is still on the drained node", p.Namespace, p.Name)
		}
	}
	eventually(t, 2*time.Minute, "both operator replicas Ready on the node left", func() error {
		ops := e.podsOf(t, "operator")
		ready := 0
		for _, o := range ops {
			if podReady(o) && o.Spec.NodeName != node && o.DeletionTimestamp == nil {
				ready++
			}
		}
		if ready != 2 {
			return fmt.Errorf("%d operator pods Ready off %s", ready, node)
		}
		return nil
	})
	t.Logf("drained %s: agent %s stayed with its spool (%d entries), capture %s stayed Indexed", node, agent.Name, len(after), capture)
}

// checkStoreStaysWithItsVolume cordons the store's node and deletes its
// pod: on a local volume it cannot move, and stays Pending (no node left
// matches its volume's node affinity), as the chart's README says; uncordoned, the node
// takes it back.
func (e *env) checkStoreStaysWithItsVolume(t *testing.T, node string) {
	t.Helper()
	ctx := context.Background()
	name := release + "-clickhouse-0"
	e.kubectl(t, "cordon", node)
	uncordoned := false
	defer func() {
		if !uncordoned {
			e.kubectl(t, "uncordon", node)
		}
	}()
	old, err := e.clientset.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if old.Spec.NodeName != node {
		t.Fatalf("the store %s is on %s, want %s (its volume's node)", name, old.Spec.NodeName, node)
	}
	if err := e.clientset.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var why string
	eventually(t, 2*time.Minute, "the new store pod is unschedulable: no other node matches its volume's node affinity", func() error {
		p, err := e.clientset.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.UID == old.UID {
			return fmt.Errorf("the old pod is still there")
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("the store's new pod was scheduled on %s, with its volume on %s", p.Spec.NodeName, node)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, volumeAffinityRefusal) {
				why = c.Message
				return nil
			}
		}
		return fmt.Errorf("pod %s: %s, conditions %+v", name, p.Status.Phase, p.Status.Conditions)
	})
	t.Logf("the store's pod with its node cordoned: Pending, %q", why)
	e.kubectl(t, "uncordon", node)
	uncordoned = true
	eventually(t, 3*time.Minute, "the store back on its node, Ready", func() error {
		p, err := e.clientset.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.NodeName != node || !podReady(p) {
			return fmt.Errorf("store pod on %q, ready %v", p.Spec.NodeName, podReady(p))
		}
		return nil
	})
}

// podsOf lists the release's pods of a component, by node name.
func (e *env) podsOf(t *testing.T, component string) []*corev1.Pod {
	t.Helper()
	pods, err := e.clientset.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=" + component})
	if err != nil {
		t.Fatal(err)
	}
	var out []*corev1.Pod
	for i := range pods.Items {
		if pods.Items[i].DeletionTimestamp == nil {
			out = append(out, &pods.Items[i])
		}
	}
	slices.SortFunc(out, func(x, y *corev1.Pod) int { return strings.Compare(x.Spec.NodeName, y.Spec.NodeName) })
	return out
}

// nodesOf is the pods' nodes, in order.
func nodesOf(pods []*corev1.Pod) []string {
	var ns []string
	for _, p := range pods {
		ns = append(ns, p.Spec.NodeName)
	}
	slices.Sort(ns)
	return ns
}

func podOn(pods []*corev1.Pod, node string) *corev1.Pod {
	for _, p := range pods {
		if p.Spec.NodeName == node {
			return p
		}
	}
	return nil
}

// waitLeader waits for the operator's Lease to name a live pod other
// than not, and returns that pod.
func (e *env) waitLeader(t *testing.T, not string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	var leader *corev1.Pod
	eventually(t, 2*time.Minute, "an operator replica holds the Lease "+operatorLease, func() error {
		l, err := e.clientset.CoordinationV1().Leases(namespace).Get(ctx, operatorLease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil {
			return fmt.Errorf("the Lease has no holder")
		}
		// controller-runtime's identity: <hostname, the pod's name>_<uuid>.
		pod, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
		if pod == not {
			return fmt.Errorf("the Lease is still %s's", not)
		}
		p, err := e.clientset.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("the Lease's holder %q: %w", *l.Spec.HolderIdentity, err)
		}
		leader = p
		return nil
	})
	return leader
}

// kill deletes the pod with no grace: the kubelet kills its containers
// at once, and the Lease is not given back.
func (e *env) kill(t *testing.T, p *corev1.Pod) {
	t.Helper()
	if err := e.clientset.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr[int64](0)}); err != nil {
		t.Fatalf("kill %s: %v", p.Name, err)
	}
}

// crash SIGKILLs the pod's containers' processes, found on the host by
// their container ids in their cgroups (the nodes share the test's
// kernel), as an OOM kill or a node's crash would end them; then deletes
// the pod with no grace, so that it is not restarted in place.
func (e *env) crash(t *testing.T, p *corev1.Pod) {
	t.Helper()
	var ids []string
	for _, cs := range p.Status.ContainerStatuses {
		if _, id, ok := strings.Cut(cs.ContainerID, "://"); ok && id != "" {
			ids = append(ids, id)
		}
	}
	var pids []int
	procs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range procs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cgroup"))
		if err == nil && slices.ContainsFunc(ids, func(id string) bool { return strings.Contains(string(b), id) }) {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		t.Fatalf("no process of pod %s's containers %v on the host", p.Name, ids)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("kill -9 %d (pod %s): %v", pid, p.Name, err)
		}
	}
	t.Logf("pod %s: kill -9 %v", p.Name, pids)
	e.kill(t, p)
}

// logLines are the lines of the pod's log that contain s.
func (e *env) logLines(t *testing.T, p *corev1.Pod, s string) []string {
	t.Helper()
	b, err := e.clientset.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("logs of %s: %v", p.Name, err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// kubectl runs the deps' kubectl against the cluster.
func (e *env) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	kubeNode := os.Getenv("SPIKEHUNT_KUBE_NODE")
	if kubeNode == "" {
		t.Fatal("SPIKEHUNT_KUBE_NODE is not set: run through make (deps/install.sh env)")
	}
	cmd := exec.Command(filepath.Join(kubeNode, "kubectl"), append([]string{"--kubeconfig", e.kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
