//go:build cluster

package vmi

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/controller/template"
)

// waitPVC polls for the claim ns/name (pollTimeout).
func waitPVC(t *testing.T, ns, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	var pvc *corev1.PersistentVolumeClaim
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, pollTimeout, true,
		func(ctx context.Context) (bool, error) {
			var err error
			pvc, err = admin.kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
			return err == nil, nil
		})
	if err != nil {
		t.Fatalf("PVC %s/%s: %v", ns, name, err)
	}
	return pvc
}

// vmStateMount checks that pod mounts claim whole at launcherpod.VMStateDir.
func vmStateMount(t *testing.T, pod *corev1.Pod, claim string) {
	t.Helper()
	found := false
	for _, v := range pod.Spec.Volumes {
		if v.Name == launcherpod.VMStateVolume {
			found = v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim && !v.PersistentVolumeClaim.ReadOnly
		}
	}
	mounted := false
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if m.Name == launcherpod.VMStateVolume {
			mounted = m.MountPath == launcherpod.VMStateDir && m.SubPath == "" && !m.ReadOnly
		}
	}
	if !found || !mounted {
		t.Errorf("Pod %s: volume %s of claim %s found %v, mounted at %s %v", pod.Name, launcherpod.VMStateVolume, claim,
			found, launcherpod.VMStateDir, mounted)
	}
}

// A persistent TPM's backend storage (KubeVirt's): the controller creates
// persistent-state-for-<vm> before the launcher Pod — labelled with the
// VM's name, 10Mi, a file system, owned by the VMI's VirtualMachine (a
// VM's claim outlives its VMIs and goes with the VM) — and keeps the VMI
// Pending (BackendStorageNotReady) until it is bound; then the Pod mounts
// it. In a second namespace, with kemu-config's vmStateStorageClass set
// to a WaitForFirstConsumer class: a bare VMI's claim is its own, asks
// ReadWriteMany (KubeVirt's rule for a configured class) and the Pod is
// created at once (its first consumer). One claim each, whatever the
// number of syncs.
func TestBackendStorage(t *testing.T) {
	ctx := context.Background()
	yes := true
	ns := newNamespace(t, "backend-storage")
	startController(t, ns, nil)
	x := newVMI("vm")
	x.Spec.Domain.Devices.TPM = &v1.TPMDevice{Persistent: &yes}
	vmRef := metav1.OwnerReference{APIVersion: v1.SchemeGroupVersion.String(), Kind: "VirtualMachine", Name: "vm",
		UID: types.UID("0b5e0a44-3c8e-4f5e-9d59-0e1f0f7a0001"), Controller: &yes, BlockOwnerDeletion: &yes}
	x.OwnerReferences = []metav1.OwnerReference{vmRef}
	createVMI(t, ns, x)

	pvc := waitPVC(t, ns, "persistent-state-for-vm")
	if pvc.Labels[launcherpod.BackendStoragePrefix] != "vm" || len(pvc.OwnerReferences) != 1 || pvc.OwnerReferences[0].UID != vmRef.UID ||
		metav1.GetControllerOf(pvc) == nil || pvc.OwnerReferences[0].Kind != "VirtualMachine" ||
		pvc.Spec.Resources.Requests.Storage().String() != "10Mi" || len(pvc.Spec.AccessModes) != 1 ||
		pvc.Spec.AccessModes[0] != corev1.ReadWriteOnce || pvc.Spec.VolumeMode == nil ||
		*pvc.Spec.VolumeMode != corev1.PersistentVolumeFilesystem || pvc.Spec.StorageClassName != nil {
		t.Errorf("claim %+v %+v", pvc.ObjectMeta, pvc.Spec)
	}
	vmi := waitVMI(t, ns, "vm", "BackendStorageNotReady", func(v *v1.VirtualMachineInstance) bool {
		c := condition(v, v1.VirtualMachineInstanceSynchronized)
		return c != nil && c.Reason == ReasonBackendStorageNotReady
	})
	if vmi.Status.Phase != v1.Pending {
		t.Errorf("phase %s, want Pending", vmi.Status.Phase)
	}
	waitEvent(t, ns, "vm", ReasonCreatedBackendStorage, "persistent-state-for-vm")
	if pods := launcherPods(t, ns); len(pods) != 0 {
		t.Errorf("%d launcher Pods before the claim is bound", len(pods))
	}
	// No PV controller here: bind it by hand.
	pvc.Status.Phase = corev1.ClaimBound
	if _, err := admin.kube.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	vmi = waitVMI(t, ns, "vm", "Scheduling", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Scheduling })
	vmStateMount(t, podOf(t, vmi), "persistent-state-for-vm")
	if c := condition(vmi, v1.VirtualMachineInstanceSynchronized); c != nil {
		t.Errorf("Synchronized %+v left behind", c)
	}

	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	sc, err := admin.kube.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta:  metav1.ObjectMeta{GenerateName: "kemu-vm-state-"},
		Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &wffc}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := admin.kube.StorageV1().StorageClasses().Delete(ctx, sc.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
	ns2 := newNamespace(t, "backend-storage-class")
	startControllerWith(t, ns2, nil, 50, template.Options{LauncherImage: launcherImage},
		func(c *Config) { c.BackendStorage = BackendStorage{StorageClass: sc.Name} })
	bare := x.DeepCopy()
	bare.OwnerReferences = nil
	createVMI(t, ns2, bare)
	vmi = waitVMI(t, ns2, "vm", "Scheduling", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Scheduling })
	pvc = waitPVC(t, ns2, "persistent-state-for-vm")
	if owner := metav1.GetControllerOf(pvc); owner == nil || owner.UID == vmRef.UID || owner.Kind != "VirtualMachineInstance" ||
		pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != sc.Name || pvc.Spec.AccessModes[0] != corev1.ReadWriteMany {
		t.Errorf("claim %+v %+v", pvc.ObjectMeta, pvc.Spec)
	}
	vmStateMount(t, podOf(t, vmi), "persistent-state-for-vm")
	for _, n := range []string{ns, ns2} {
		if l, err := admin.kube.CoreV1().PersistentVolumeClaims(n).List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 1 {
			t.Errorf("%s: claims %v (%v), want one", n, l, err)
		}
	}
}
