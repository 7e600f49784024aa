//go:build linux

package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The NetworkPolicy engine (Options.NetworkPolicy): kube-network-policies,
// as its project runs it, a privileged hostNetwork pod with a
// ServiceAccount that reads pods, namespaces and NetworkPolicies. Its rules
// live in one nftables table of the host; it hands each new connection to
// or from a pod to an nfqueue and answers accept or drop by the policies.
const (
	// PolicyEngineImage is the engine's one-file image, built by Start
	// from SPIKEHUNT_KUBE_NETWORK_POLICIES.
	PolicyEngineImage = "spikehunt.local/kube-network-policies:0.8.0"
	// policyEngineName names the pod, its ServiceAccount and its RBAC.
	policyEngineName = "kube-network-policies"
	// policyTable is the nftables table (family inet) the engine writes.
	policyTable = "kube-network-policies"
)

// startPolicyEngine imports the engine's image and runs its pod, and
// returns when the pod runs and its nftables table is on the host: from
// then on a packet to or from a pod is judged by the policies.
func (c *Cluster) startPolicyEngine(ctx context.Context, cs kubernetes.Interface, bin string) error {
	data, err := os.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("the NetworkPolicy engine: %w (deps/install.sh kube-network-policies)", err)
	}
	archive := filepath.Join(c.dir, "images", "kube-network-policies.oci.tar")
	if err := WriteImageArchive(archive, Image{Name: PolicyEngineImage,
		Files: []ImageFile{{Path: "/kube-network-policies", Mode: 0o755, Data: data}}, Entrypoint: []string{"/kube-network-policies"}}); err != nil {
		return err
	}
	if err := c.ImportImage(ctx, archive); err != nil {
		return err
	}
	if err := createPolicyEngineObjects(ctx, cs, c.opts.NodeName); err != nil {
		return fmt.Errorf("the NetworkPolicy engine: %w", err)
	}
	var last error
	for {
		if last = policyEngineUp(ctx, cs); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: waiting for the NetworkPolicy engine: %w; last: %v (its log is under %s)", ctx.Err(), last, filepath.Join(c.logDir, "pods"))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// policyEngineUp is nil once the engine's pod runs and its table exists.
func policyEngineUp(ctx context.Context, cs kubernetes.Interface) error {
	p, err := cs.CoreV1().Pods("kube-system").Get(ctx, policyEngineName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, st := range p.Status.ContainerStatuses {
		if st.RestartCount > 0 {
			return fmt.Errorf("pod kube-system/%s restarted %d times (last: %+v)", policyEngineName, st.RestartCount, st.LastTerminationState.Terminated)
		}
	}
	if p.Status.Phase != corev1.PodRunning {
		return fmt.Errorf("pod kube-system/%s is %s", policyEngineName, p.Status.Phase)
	}
	if !nftTableExists(policyTable) {
		return fmt.Errorf("the pod runs but nftables table inet %s is not there yet", policyTable)
	}
	return nil
}

func createPolicyEngineObjects(ctx context.Context, cs kubernetes.Interface, node string) error {
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: policyEngineName},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "namespaces", "nodes"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
		},
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("ClusterRole %s: %w", policyEngineName, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: policyEngineName, Namespace: "kube-system"}}
	if _, err := cs.CoreV1().ServiceAccounts("kube-system").Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("ServiceAccount kube-system/%s: %w", policyEngineName, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policyEngineName},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: policyEngineName},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: policyEngineName, Namespace: "kube-system"}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("ClusterRoleBinding %s: %w", policyEngineName, err)
	}
	privileged := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: policyEngineName, Namespace: "kube-system", Labels: map[string]string{"app": policyEngineName}},
		Spec: corev1.PodSpec{
			NodeName:           node,
			HostNetwork:        true,
			ServiceAccountName: policyEngineName,
			PriorityClassName:  "system-node-critical",
			Tolerations:        []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name:            policyEngineName,
				Image:           PolicyEngineImage,
				ImagePullPolicy: corev1.PullNever,
				Args: []string{
					"--hostname-override=" + node,
					// The host's network namespace: a fixed port could be
					// another test's.
					"--metrics-bind-address=127.0.0.1:0",
					// NRI needs containerd 1.7; 1.6 runs here.
					"--disable-nri",
					// Only for kernels before 6.12.
					"--netfilter-bug-1766-fix=false",
					"--v=2",
				},
				SecurityContext: &corev1.SecurityContext{Privileged: &privileged},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods("kube-system").Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("pod kube-system/%s: %w", policyEngineName, err)
	}
	return nil
}

// nftTableExists reports whether the host has the inet table name.
func nftTableExists(name string) bool {
	return exec.Command("nft", "list", "table", "inet", name).Run() == nil
}

// deleteNFTable deletes the host's inet table name if it is there: the
// engine removes it when it stops cleanly, but Stop kills the pods.
func deleteNFTable(name string) error {
	if !nftTableExists(name) {
		return nil
	}
	if out, err := exec.Command("nft", "delete", "table", "inet", name).CombinedOutput(); err != nil {
		return fmt.Errorf("nft delete table inet %s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}
