package template

import (
	"path"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func TestRenderConfigVolumes(t *testing.T) {
	yes := true
	x := vmi("256Mi", func(x *v1.VirtualMachineInstance) {
		x.Annotations = map[string]string{
			"example.com/owner": "team-a", // copied
			"kubectl.kubernetes.io/last-applied-configuration":       "{}",
			"container.apparmor.security.beta.kubernetes.io/compute": "unconfined",
			"kemu.dev/paused":             "true",
			"io.kubernetes.cri-o.Devices": "/dev/sda",
		}
		x.Spec.Volumes = append(x.Spec.Volumes,
			v1.Volume{Name: "cm", ConfigMap: &v1.ConfigMapVolumeSource{Name: "app-config", Optional: &yes}},
			v1.Volume{Name: "sec", Secret: &v1.SecretVolumeSource{SecretName: "app-secret"}},
			v1.Volume{Name: "sa", ServiceAccount: &v1.ServiceAccountVolumeSource{ServiceAccountName: "builder"}},
			v1.Volume{Name: "down", DownwardAPI: &v1.DownwardAPIVolumeSource{Fields: []corev1.DownwardAPIVolumeFile{
				{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}},
			v1.Volume{Name: "unattend", Sysprep: &v1.SysprepSource{Secret: &corev1.LocalObjectReference{Name: "win"}}},
		)
	})
	pod, err := NewService(Options{LauncherImage: "kemu.local/launcher:1"}).Render(Input{VMI: x})
	if err != nil {
		t.Fatal(err)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		mounts[m.MountPath] = m
	}
	for _, tc := range []struct {
		volume string
		check  func(corev1.VolumeSource) bool
	}{
		{"cm", func(s corev1.VolumeSource) bool {
			return s.ConfigMap != nil && s.ConfigMap.Name == "app-config" && *s.ConfigMap.Optional
		}},
		{"sec", func(s corev1.VolumeSource) bool { return s.Secret != nil && s.Secret.SecretName == "app-secret" }},
		{"sa", func(s corev1.VolumeSource) bool {
			return s.Projected != nil && len(s.Projected.Sources) == 3 && s.Projected.Sources[0].ServiceAccountToken.Path == "token"
		}},
		{"down", func(s corev1.VolumeSource) bool {
			return s.DownwardAPI != nil && s.DownwardAPI.Items[0].FieldRef.FieldPath == "metadata.labels"
		}},
		{"unattend", func(s corev1.VolumeSource) bool { return s.Secret != nil && s.Secret.SecretName == "win" }},
	} {
		m, ok := mounts[path.Join(launcherpod.ConfigVolumesDir, tc.volume)]
		if !ok || !m.ReadOnly {
			t.Errorf("%s: mount %+v (found %v)", tc.volume, m, ok)
			continue
		}
		if v := vols[m.Name]; !tc.check(v.VolumeSource) {
			t.Errorf("%s: Pod volume %+v", tc.volume, v)
		}
	}
	if pod.Spec.ServiceAccountName != "builder" || *pod.Spec.AutomountServiceAccountToken {
		t.Errorf("serviceAccountName %q, automount %v: want builder, false (the token only in the volume)",
			pod.Spec.ServiceAccountName, *pod.Spec.AutomountServiceAccountToken)
	}
	if len(pod.Annotations) != 1 || pod.Annotations["example.com/owner"] != "team-a" {
		t.Errorf("annotations %v: want only example.com/owner", pod.Annotations)
	}
}
