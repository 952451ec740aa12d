package template

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// backendStorage mounts the VM's backend storage claim (Input.
// BackendStorage) whole and writable at launcherpod.VMStateDir for a VMI
// with a persistent TPM: the launcher keeps swtpm's state in its swtpm/
// (launcher/tpm.go checks what it finds there). KubeVirt mounts subPaths
// of it instead (swtpm, swtpm-localca, nvram, meta); kemu's launcher makes
// and checks its subdirectory itself, so the kubelet creates nothing in
// the claim. Nothing without a persistent TPM.
func (b *builder) backendStorage() error {
	if !v1.HasPersistentTPM(&b.vmi.Spec) {
		return nil
	}
	if b.in.BackendStorage == "" {
		return fmt.Errorf("template: VMI %s/%s: spec.domain.devices.tpm.persistent needs its backend storage claim (%s)",
			b.vmi.Namespace, b.vmi.Name, launcherpod.BackendStoragePVCName(b.vmi.Name))
	}
	b.podVolumes = append(b.podVolumes, corev1.Volume{Name: launcherpod.VMStateVolume, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: b.in.BackendStorage}}})
	b.mounts = append(b.mounts, corev1.VolumeMount{Name: launcherpod.VMStateVolume, MountPath: launcherpod.VMStateDir})
	return nil
}
