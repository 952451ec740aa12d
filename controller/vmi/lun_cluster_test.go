//go:build cluster

package vmi

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// A lun on a file-system claim fails the VMI before any Pod (the claim's
// volume mode is known only to the controller), naming the lun; on a
// block claim the launcher Pod is made, the claim as a device.
func TestLUNClaimMode(t *testing.T) {
	ns := newNamespace(t, "lun")
	startController(t, ns, nil)
	for _, c := range []struct {
		name string
		mode corev1.PersistentVolumeMode
	}{{"fs-claim", corev1.PersistentVolumeFilesystem}, {"blk-claim", corev1.PersistentVolumeBlock}} {
		mode := c.mode
		_, err := admin.kube.CoreV1().PersistentVolumeClaims(ns).Create(context.Background(), &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: c.name},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeMode: &mode,
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	withLUN := func(name, claim string) *v1.VirtualMachineInstance {
		x := newVMI(name)
		x.Spec.Domain.Devices.Disks = append(x.Spec.Domain.Devices.Disks, v1.Disk{Name: "san", LUN: &v1.LunTarget{}})
		x.Spec.Volumes = append(x.Spec.Volumes, v1.Volume{Name: "san", PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}})
		return x
	}
	createVMI(t, ns, withLUN("on-fs", "fs-claim"))
	vmi := waitVMI(t, ns, "on-fs", "Failed", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Failed })
	if c := condition(vmi, v1.VirtualMachineInstanceSynchronized); vmi.Status.Reason != ReasonInvalidSpec || c == nil ||
		!strings.Contains(c.Message, "spec.domain.devices.disks[1].lun") || !strings.Contains(c.Message, "volumeMode Filesystem") {
		t.Errorf("reason %q condition %+v", vmi.Status.Reason, c)
	}
	waitEvent(t, ns, "on-fs", "Failed", "spec.domain.devices.disks[1].lun")

	createVMI(t, ns, withLUN("on-block", "blk-claim"))
	vmi = waitVMI(t, ns, "on-block", "Scheduling", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Scheduling })
	pod := podOf(t, vmi)
	if devs := pod.Spec.Containers[0].VolumeDevices; len(devs) != 1 {
		t.Errorf("volume devices %+v, want the block claim", devs)
	}
	if pods := launcherPods(t, ns); len(pods) != 1 {
		t.Errorf("%d launcher Pods, want 1 (only the block claim's VMI)", len(pods))
	}
}
