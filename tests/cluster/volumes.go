//go:build linux

package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// StorageClass is the node's default StorageClass. It provisions nothing:
// AddVolumes makes the PersistentVolumes its claims bind to, as an admin
// of a cluster without a provisioner would.
const StorageClass = "spikehunt-local"

func createStorageClass(ctx context.Context, cs kubernetes.Interface) error {
	immediate := storagev1.VolumeBindingImmediate
	sc := &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: StorageClass, Annotations: map[string]string{
			"storageclass.kubernetes.io/is-default-class": "true",
		}},
		Provisioner:       "kubernetes.io/no-provisioner",
		VolumeBindingMode: &immediate,
	}
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("StorageClass %s: %w", StorageClass, err)
	}
	return nil
}

// AddVolumes creates n PersistentVolumes of size (a quantity, "1Gi") in
// StorageClass, each a folder under Dir/volumes that any user may write
// (a hostPath volume gets no fsGroup ownership change, and the chart's
// pods run as non-root). A claim without a storageClassName gets
// StorageClass and binds to one of them; the size is not enforced. The
// volumes use the Retain policy: they and their data go with Stop.
//
// Each volume is the first node's, as a local volume is its node's: its
// node affinity names that node, so a pod of its claim is scheduled there
// and nowhere else, also when the cluster has more nodes (whose folders are
// on the same disk here, but not in a real cluster).
func (c *Cluster) AddVolumes(ctx context.Context, n int, size string) error {
	q, err := resource.ParseQuantity(size)
	if err != nil {
		return fmt.Errorf("cluster: volume size %q: %w", size, err)
	}
	cs, err := c.clientset()
	if err != nil {
		return err
	}
	hostPathDir := corev1.HostPathDirectory
	for range n {
		c.volumes++
		name := fmt.Sprintf("spikehunt-local-%d", c.volumes)
		dir := filepath.Join(c.dir, "volumes", name)
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return fmt.Errorf("cluster: volume %s: %w", name, err)
		}
		if err := os.Chmod(dir, 0o777); err != nil { // past the umask
			return fmt.Errorf("cluster: volume %s: %w", name, err)
		}
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: q},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				StorageClassName:              StorageClass,
				PersistentVolumeSource: corev1.PersistentVolumeSource{
					HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &hostPathDir},
				},
				NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{
						Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{c.opts.NodeName},
					}},
				}}}},
			},
		}
		if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("cluster: PersistentVolume %s: %w", name, err)
		}
	}
	return nil
}
