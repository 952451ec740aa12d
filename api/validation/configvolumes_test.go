package validation

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func TestConfigVolumes(t *testing.T) {
	fieldRef := func(p, fp string) corev1.DownwardAPIVolumeFile {
		return corev1.DownwardAPIVolumeFile{Path: p, FieldRef: &corev1.ObjectFieldSelector{FieldPath: fp}}
	}
	for _, tc := range []struct {
		name string
		vols []v1.Volume
		want []string // "<error type> <field path>", sorted
	}{
		{name: "every kind", vols: []v1.Volume{
			{Name: "cm", ConfigMap: &v1.ConfigMapVolumeSource{Name: "app-config", VolumeLabel: "APP"}},
			{Name: "sec", Secret: &v1.SecretVolumeSource{SecretName: "app.secret"}},
			{Name: "sa", ServiceAccount: &v1.ServiceAccountVolumeSource{ServiceAccountName: "default"}},
			{Name: "down", DownwardAPI: &v1.DownwardAPIVolumeSource{Fields: []corev1.DownwardAPIVolumeFile{
				fieldRef("labels", "metadata.labels"), fieldRef("team", "metadata.annotations['example.com/team']"), fieldRef("sub/name", "metadata.name")}}},
			{Name: "win", Sysprep: &v1.SysprepSource{ConfigMap: &corev1.LocalObjectReference{Name: "unattend"}}},
			{Name: "cd", CloudInitConfigDrive: &v1.CloudInitConfigDriveSource{UserData: "#cloud-config\n"}},
		}, want: []string{"Invalid value spec.volumes[7].cloudInitConfigDrive"}}, // a second cloud-init volume beside baseVMI's
		{name: "names", vols: []v1.Volume{
			{Name: "cm", ConfigMap: &v1.ConfigMapVolumeSource{}},
			{Name: "sec", Secret: &v1.SecretVolumeSource{SecretName: "Bad_Name"}},
			{Name: "sa", ServiceAccount: &v1.ServiceAccountVolumeSource{}},
		}, want: []string{"Invalid value spec.volumes[3].secret.secretName", "Required value spec.volumes[2].configMap.name",
			"Required value spec.volumes[4].serviceAccount.serviceAccountName"}},
		{name: "labels", vols: []v1.Volume{
			{Name: "a", ConfigMap: &v1.ConfigMapVolumeSource{Name: "x", VolumeLabel: strings.Repeat("L", 33)}},
			{Name: "b", Secret: &v1.SecretVolumeSource{SecretName: "x", VolumeLabel: "tab\there"}},
			{Name: "c", DownwardAPI: &v1.DownwardAPIVolumeSource{VolumeLabel: " padded"}},
		}, want: []string{"Invalid value spec.volumes[3].secret.volumeLabel", "Invalid value spec.volumes[4].downwardAPI.volumeLabel",
			"Too long spec.volumes[2].configMap.volumeLabel"}},
		{name: "two service accounts", vols: []v1.Volume{
			{Name: "a", ServiceAccount: &v1.ServiceAccountVolumeSource{ServiceAccountName: "x"}},
			{Name: "b", ServiceAccount: &v1.ServiceAccountVolumeSource{ServiceAccountName: "y"}},
		}, want: []string{"Invalid value spec.volumes[3].serviceAccount"}},
		{name: "downward API files", vols: []v1.Volume{{Name: "d", DownwardAPI: &v1.DownwardAPIVolumeSource{Fields: []corev1.DownwardAPIVolumeFile{
			fieldRef("../escape", "metadata.name"),
			fieldRef("/abs", "metadata.name"),
			fieldRef("ip", "status.podIP"),
			{Path: "cpu", ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}},
			{Path: "nothing"},
			fieldRef("labels", "metadata.labels"),
			fieldRef("labels", "metadata.annotations"),
			{Path: "mode", Mode: ptr(int32(0o1777)), FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}},
		}}}}, want: []string{
			"Duplicate value spec.volumes[2].downwardAPI.fields[6].path",
			"Forbidden spec.volumes[2].downwardAPI.fields[3].resourceFieldRef",
			"Invalid value spec.volumes[2].downwardAPI.fields[0].path",
			"Invalid value spec.volumes[2].downwardAPI.fields[1].path",
			"Invalid value spec.volumes[2].downwardAPI.fields[7].mode",
			"Required value spec.volumes[2].downwardAPI.fields[4].fieldRef",
			"Unsupported value spec.volumes[2].downwardAPI.fields[2].fieldRef.fieldPath",
		}},
		{name: "sysprep needs one source", vols: []v1.Volume{
			{Name: "a", Sysprep: &v1.SysprepSource{}},
			{Name: "b", Sysprep: &v1.SysprepSource{ConfigMap: &corev1.LocalObjectReference{Name: "x"}, Secret: &corev1.LocalObjectReference{Name: "y"}}},
			{Name: "c", Sysprep: &v1.SysprepSource{Secret: &corev1.LocalObjectReference{}}},
		}, want: []string{"Invalid value spec.volumes[2].sysprep", "Invalid value spec.volumes[3].sysprep", "Required value spec.volumes[4].sysprep.secret.name"}},
		{name: "config drive rules", vols: []v1.Volume{{Name: "cd", CloudInitConfigDrive: &v1.CloudInitConfigDriveSource{UserDataBase64: "!!"}}},
			want: []string{"Invalid value spec.volumes[2].cloudInitConfigDrive", "Invalid value spec.volumes[2].cloudInitConfigDrive.userDataBase64"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vmi := baseVMI()
			for _, v := range tc.vols {
				vmi.Spec.Volumes = append(vmi.Spec.Volumes, v)
				vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, v1.Disk{Name: v.Name, Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}})
			}
			v1.SetVirtualMachineInstanceDefaults(vmi)
			got := errorKeys(ValidateVirtualMachineInstance(vmi))
			want := append([]string(nil), tc.want...)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("errors\n got %q\nwant %q\n%v", got, want, ValidateVirtualMachineInstance(vmi))
			}
		})
	}
}

// A config volume is read-only: never on a SATA disk (ide-hd cannot be).
func TestConfigVolumeOnSATA(t *testing.T) {
	vmi := baseVMI()
	vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1.Volume{Name: "cm", ConfigMap: &v1.ConfigMapVolumeSource{Name: "x"}})
	vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, v1.Disk{Name: "cm", Disk: &v1.DiskTarget{Bus: v1.DiskBusSATA}})
	v1.SetVirtualMachineInstanceDefaults(vmi)
	if got := errorKeys(ValidateVirtualMachineInstance(vmi)); len(got) != 1 || !strings.HasPrefix(got[0], "Invalid value spec.domain.devices.disks[1]") {
		t.Errorf("errors %q", got)
	}
}
