package template

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// A persistent TPM's launcher Pod mounts its backend storage claim whole
// and writable at launcherpod.VMStateDir; without the claim Render refuses
// (never a Pod whose TPM would lose its state); a TPM that is not
// persistent, or a disabled one, mounts nothing.
func TestRenderBackendStorage(t *testing.T) {
	svc := NewService(Options{LauncherImage: "kemu.local/launcher:1"})
	yes, no := true, false
	for _, tc := range []struct {
		name    string
		tpm     *v1.TPMDevice
		claim   string
		mounted bool
		wantErr string
	}{
		{name: "no TPM"},
		{name: "TPM", tpm: &v1.TPMDevice{}},
		{name: "disabled persistent", tpm: &v1.TPMDevice{Enabled: &no, Persistent: &yes}},
		{name: "persistent", tpm: &v1.TPMDevice{Persistent: &yes}, claim: "persistent-state-for-x", mounted: true},
		{name: "persistent without claim", tpm: &v1.TPMDevice{Persistent: &yes},
			wantErr: "spec.domain.devices.tpm.persistent needs its backend storage claim"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := vmi("256Mi", func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.TPM = tc.tpm })
			pod, err := svc.Render(Input{VMI: x, BackendStorage: tc.claim})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			vol := slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool {
				return v.Name == launcherpod.VMStateVolume && v.PersistentVolumeClaim != nil &&
					v.PersistentVolumeClaim.ClaimName == tc.claim && !v.PersistentVolumeClaim.ReadOnly
			})
			mount := slices.ContainsFunc(pod.Spec.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == launcherpod.VMStateVolume && m.MountPath == launcherpod.VMStateDir && !m.ReadOnly && m.SubPath == ""
			})
			if vol != tc.mounted || mount != tc.mounted {
				t.Errorf("volume %v mount %v, want %v", vol, mount, tc.mounted)
			}
		})
	}
}
