package validation

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func TestFilesystems(t *testing.T) {
	vfs := &v1.FilesystemVirtiofs{}
	fs := func(name string) v1.Filesystem { return v1.Filesystem{Name: name, Virtiofs: vfs} }
	for _, tc := range []struct {
		name  string
		vols  []v1.Volume
		fss   []v1.Filesystem
		disks []string // extra disks naming volumes
		want  []string // "<error type> <field path>", sorted
	}{
		{name: "every shareable kind", vols: []v1.Volume{
			{Name: "data", PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}},
			{Name: "cm", ConfigMap: &v1.ConfigMapVolumeSource{Name: "app"}},
			{Name: "sec", Secret: &v1.SecretVolumeSource{SecretName: "app"}},
			{Name: "sa", ServiceAccount: &v1.ServiceAccountVolumeSource{ServiceAccountName: "default"}},
			{Name: "down", DownwardAPI: &v1.DownwardAPIVolumeSource{}},
		}, fss: []v1.Filesystem{fs("data"), fs("cm"), fs("sec"), fs("sa"), fs("down")}},
		{name: "disk kinds refused", vols: []v1.Volume{
			{Name: "ed", EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Mi")}},
			{Name: "sys", Sysprep: &v1.SysprepSource{ConfigMap: &corev1.LocalObjectReference{Name: "x"}}},
		}, fss: []v1.Filesystem{fs("ed"), fs("sys"), fs("root")}, want: []string{
			"Invalid value spec.domain.devices.filesystems[0].name",
			"Invalid value spec.domain.devices.filesystems[1].name",
			"Invalid value spec.domain.devices.filesystems[2].name", // root: a containerDisk, and its disk
			"Invalid value spec.domain.devices.filesystems[2].name",
		}},
		{name: "disk and filesystem", vols: []v1.Volume{{Name: "cm", ConfigMap: &v1.ConfigMapVolumeSource{Name: "app"}}},
			fss: []v1.Filesystem{fs("cm")}, disks: []string{"cm"},
			want: []string{"Invalid value spec.domain.devices.filesystems[0].name"}},
		{name: "names", vols: []v1.Volume{
			{Name: strings.Repeat("a", 37), ConfigMap: &v1.ConfigMapVolumeSource{Name: "app"}},
			{Name: "cm", ConfigMap: &v1.ConfigMapVolumeSource{Name: "app"}},
		}, fss: []v1.Filesystem{fs(strings.Repeat("a", 37)), fs("cm"), fs("cm"), {Name: "missing"}}, want: []string{
			"Duplicate value spec.domain.devices.filesystems[2].name",
			"Invalid value spec.domain.devices.filesystems[3].name",
			"Required value spec.domain.devices.filesystems[3].virtiofs",
			"Too long spec.domain.devices.filesystems[0].name",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vmi := baseVMI()
			vmi.Spec.Volumes = append(vmi.Spec.Volumes, tc.vols...)
			vmi.Spec.Domain.Devices.Filesystems = tc.fss
			for _, d := range tc.disks {
				vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, v1.Disk{Name: d, Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}})
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

// A volume shared by a filesystem gets no disk from the defaults.
func TestFilesystemVolumeGetsNoDisk(t *testing.T) {
	vmi := baseVMI()
	vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1.Volume{Name: "cm", ConfigMap: &v1.ConfigMapVolumeSource{Name: "app"}})
	vmi.Spec.Domain.Devices.Filesystems = []v1.Filesystem{{Name: "cm", Virtiofs: &v1.FilesystemVirtiofs{}}}
	v1.SetVirtualMachineInstanceDefaults(vmi)
	for _, d := range vmi.Spec.Domain.Devices.Disks {
		if d.Name == "cm" {
			t.Errorf("the defaults gave filesystem cm a disk: %v", vmi.Spec.Domain.Devices.Disks)
		}
	}
}

func TestContainerPath(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name   string
		cp     v1.ContainerPathVolumeSource
		asDisk bool
		want   []string
	}{
		{name: "a token projection", cp: v1.ContainerPathVolumeSource{Path: "/var/run/secrets/eks.amazonaws.com/serviceaccount", ReadOnly: &yes}},
		{name: "as a disk", cp: v1.ContainerPathVolumeSource{Path: "/var/run/secrets/x"}, asDisk: true,
			want: []string{"Invalid value spec.volumes[2].name"}},
		{name: "writable", cp: v1.ContainerPathVolumeSource{Path: "/var/run/secrets/x", ReadOnly: &no},
			want: []string{"Invalid value spec.volumes[2].containerPath.readOnly"}},
		{name: "kemu's own files", cp: v1.ContainerPathVolumeSource{Path: "/var/run/kemu/private"},
			want: []string{"Forbidden spec.volumes[2].containerPath.path"}},
		{name: "a system tree", cp: v1.ContainerPathVolumeSource{Path: "/proc"},
			want: []string{"Forbidden spec.volumes[2].containerPath.path"}},
		{name: "relative", cp: v1.ContainerPathVolumeSource{Path: "var/run/secrets"},
			want: []string{"Invalid value spec.volumes[2].containerPath.path"}},
		{name: "dot-dot", cp: v1.ContainerPathVolumeSource{Path: "/var/run/secrets/../kemu"},
			want: []string{"Invalid value spec.volumes[2].containerPath.path"}},
		{name: "root", cp: v1.ContainerPathVolumeSource{Path: "/"},
			want: []string{"Invalid value spec.volumes[2].containerPath.path"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vmi := baseVMI()
			cp := tc.cp
			vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1.Volume{Name: "token", ContainerPath: &cp})
			if tc.asDisk {
				vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, v1.Disk{Name: "token"})
			} else {
				vmi.Spec.Domain.Devices.Filesystems = []v1.Filesystem{{Name: "token", Virtiofs: &v1.FilesystemVirtiofs{}}}
			}
			v1.SetVirtualMachineInstanceDefaults(vmi)
			got := errorKeys(ValidateVirtualMachineInstance(vmi))
			if tc.asDisk {
				got = slices.DeleteFunc(got, func(k string) bool { return strings.HasPrefix(k, "Invalid value spec.domain.devices.disks") })
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("errors %q, want %q\n%v", got, tc.want, ValidateVirtualMachineInstance(vmi))
			}
		})
	}
}
