package validation

import (
	"strings"
	"testing"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// A cluster refuses every local image reference (containerDisks and the
// kernelBoot container, in a VMI and in a VM's template) naming the field
// and saying why; registry references pass.
func TestValidateForCluster(t *testing.T) {
	spec := func(kernel string, disks ...string) v1.VirtualMachineInstanceSpec {
		var s v1.VirtualMachineInstanceSpec
		if kernel != "" {
			s.Domain.Firmware = &v1.Firmware{KernelBoot: &v1.KernelBoot{Container: &v1.KernelBootContainer{Image: kernel, KernelPath: "/vmlinuz"}}}
		}
		s.Volumes = append(s.Volumes, v1.Volume{Name: "ci", CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "#cloud-config\n"}})
		for _, d := range disks {
			s.Volumes = append(s.Volumes, v1.Volume{Name: "d", ContainerDisk: &v1.ContainerDiskSource{Image: d}})
		}
		return s
	}
	vmi := func(s v1.VirtualMachineInstanceSpec) any { return &v1.VirtualMachineInstance{Spec: s} }
	vm := func(s v1.VirtualMachineInstanceSpec) any {
		return &v1.VirtualMachine{Spec: v1.VirtualMachineSpec{Template: &v1.VirtualMachineInstanceTemplateSpec{Spec: s}}}
	}
	tests := []struct {
		name string
		obj  any
		want []string // the errors' fields
	}{
		{"registry images", vmi(spec("quay.io/kubevirt/alpine-ext-kernel-boot-demo", "quay.io/containerdisks/cirros:6.2", "localhost:5000/os@sha256:"+strings.Repeat("a", 64))), nil},
		{"oci containerDisk", vmi(spec("", "quay.io/containerdisks/cirros:6.2", "oci:_out/testguest/oci/containerdisk")),
			[]string{"spec.volumes[2].containerDisk.image"}},
		{"oci-archive and docker-archive", vmi(spec("", "oci-archive:/tmp/a.tar", "docker-archive:b.tar:os:1")),
			[]string{"spec.volumes[1].containerDisk.image", "spec.volumes[2].containerDisk.image"}},
		{"oci kernelBoot", vmi(spec("oci:_out/testguest/oci/kernelboot")),
			[]string{"spec.domain.firmware.kernelBoot.container.image"}},
		{"VM template", vm(spec("oci:k", "oci:d")),
			[]string{"spec.template.spec.domain.firmware.kernelBoot.container.image", "spec.template.spec.volumes[1].containerDisk.image"}},
		{"VM without a template", &v1.VirtualMachine{}, nil},
		{"a name merely containing oci:", vmi(spec("", "registry.example/oci:1")), nil},
		{"other kinds", &v1.VirtualMachineInstanceMigration{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := ValidateForCluster(tt.obj)
			if len(errs) != len(tt.want) {
				t.Fatalf("got %v, want errors at %v", errs, tt.want)
			}
			for i, e := range errs {
				if e.Field != tt.want[i] {
					t.Errorf("error %d at %s, want %s", i, e.Field, tt.want[i])
				}
				if !strings.Contains(e.Error(), "references are for kemuctl run only; a cluster pulls images from a registry") {
					t.Errorf("error %q does not say why", e.Error())
				}
			}
		})
	}
	if e := ValidateForCluster(vmi(spec("", "oci:x")))[0].Error(); e != `spec.volumes[1].containerDisk.image: Forbidden: "oci:x": oci: references are for kemuctl run only; a cluster pulls images from a registry` {
		t.Errorf("message %q", e)
	}
}
