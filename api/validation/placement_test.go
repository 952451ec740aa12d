package validation

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func TestValidatePlacement(t *testing.T) {
	dedicated := func(vmi *v1.VirtualMachineInstance) {
		vmi.Spec.Domain.CPU = &v1.CPU{Sockets: 1, Cores: 2, Threads: 1, DedicatedCPUPlacement: true}
	}
	hugepages := func(size string) func(*v1.VirtualMachineInstance) {
		return func(vmi *v1.VirtualMachineInstance) { vmi.Spec.Domain.Memory.Hugepages = &v1.Hugepages{PageSize: size} }
	}
	all := func(fs ...func(*v1.VirtualMachineInstance)) func(*v1.VirtualMachineInstance) {
		return func(vmi *v1.VirtualMachineInstance) {
			for _, f := range fs {
				f(vmi)
			}
		}
	}
	numa := func(vmi *v1.VirtualMachineInstance) {
		vmi.Spec.Domain.CPU.NUMA = &v1.NUMA{GuestMappingPassthrough: &v1.NUMAGuestMappingPassthrough{}}
	}
	cpu := func(list string, q string) func(*v1.VirtualMachineInstance) {
		return func(vmi *v1.VirtualMachineInstance) {
			r := &vmi.Spec.Domain.Resources
			if list == "requests" {
				r.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}
			} else {
				r.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}
			}
		}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*v1.VirtualMachineInstance)
		want   []string
	}{
		{"dedicated", dedicated, nil},
		{"dedicated, isolated, numa, realtime, hugepages", all(dedicated, hugepages("2Mi"), numa, func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.CPU.IsolateEmulatorThread = true
			vmi.Spec.Domain.CPU.Realtime = &v1.Realtime{Mask: "0-1,^1"}
		}), nil},
		{"isolate without dedicated", func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.CPU = &v1.CPU{Sockets: 1, Cores: 1, Threads: 1, IsolateEmulatorThread: true}
		}, []string{"Invalid value spec.domain.cpu.isolateEmulatorThread"}},
		{"numa without dedicated or hugepages", func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.CPU = &v1.CPU{Sockets: 1, Cores: 1, Threads: 1}
			numa(vmi)
		}, []string{"Invalid value spec.domain.cpu.numa.guestMappingPassthrough", "Invalid value spec.domain.cpu.numa.guestMappingPassthrough"}},
		{"empty numa is nothing", func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.CPU = &v1.CPU{Sockets: 1, Cores: 1, Threads: 1, NUMA: &v1.NUMA{}}
		}, nil},
		{"realtime without dedicated and numa", func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.CPU = &v1.CPU{Sockets: 1, Cores: 1, Threads: 1, Realtime: &v1.Realtime{}}
		}, []string{"Required value spec.domain.cpu.dedicatedCpuPlacement", "Required value spec.domain.cpu.numa.guestMappingPassthrough"}},
		{"realtime mask past the vCPUs", all(dedicated, hugepages("2Mi"), numa, func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.CPU.Realtime = &v1.Realtime{Mask: "0-2"}
		}), []string{"Invalid value spec.domain.cpu.realtime.mask"}},
		{"fractional cpu", all(dedicated, cpu("requests", "1500m")), []string{"Invalid value spec.domain.resources.requests.cpu"}},
		{"cpu limit not the vCPUs", all(dedicated, cpu("limits", "3")), []string{"Invalid value spec.domain.resources.limits.cpu"}},
		{"cpu request the vCPUs", all(dedicated, cpu("requests", "2")), nil},
		{"memory request below limit", all(dedicated, func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("100Mi")}
			vmi.Spec.Domain.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}
		}), []string{"Invalid value spec.domain.resources.requests.memory"}},
		{"three threads", func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.CPU = &v1.CPU{Sockets: 1, Cores: 1, Threads: 3, DedicatedCPUPlacement: true}
		}, []string{"Invalid value spec.domain.cpu.threads"}},
		{"hugepages 1Gi", func(vmi *v1.VirtualMachineInstance) {
			g := resource.MustParse("2Gi")
			vmi.Spec.Domain.Memory = &v1.Memory{Guest: &g, Hugepages: &v1.Hugepages{PageSize: "1Gi"}}
		}, nil},
		{"hugepages 4Ki", hugepages("4Ki"), []string{"Unsupported value spec.domain.memory.hugepages.pageSize"}},
		{"guest below a page", hugepages("1Gi"), []string{"Invalid value spec.domain.memory.guest"}},
		{"guest not whole pages", func(vmi *v1.VirtualMachineInstance) {
			g := resource.MustParse("129Mi")
			vmi.Spec.Domain.Memory = &v1.Memory{Guest: &g, Hugepages: &v1.Hugepages{PageSize: "2Mi"}}
		}, []string{"Invalid value spec.domain.memory.guest"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vmi := baseVMI()
			v1.SetVirtualMachineInstanceDefaults(vmi)
			tc.mutate(vmi)
			got := errorKeys(ValidateVirtualMachineInstance(vmi))
			if !slices.Equal(got, tc.want) {
				t.Errorf("errors %q, want %q\n%v", got, tc.want, ValidateVirtualMachineInstance(vmi))
			}
		})
	}
}

func TestParseRealtimeMask(t *testing.T) {
	for _, tc := range []struct {
		mask  string
		vcpus int
		want  []bool
		bad   bool
	}{
		{"", 3, []bool{true, true, true}, false},
		{"0-3,^1", 4, []bool{true, false, true, true}, false},
		{"0,2", 3, []bool{true, false, true}, false},
		{"2-3", 4, []bool{false, false, true, true}, false},
		{"4", 4, nil, true},
		{"3-1", 4, nil, true},
		{"^0", 2, nil, true},
		{"a", 2, nil, true},
		{"-1", 2, nil, true},
	} {
		got, err := ParseRealtimeMask(tc.mask, tc.vcpus)
		if (err != nil) != tc.bad || !slices.Equal(got, tc.want) {
			t.Errorf("ParseRealtimeMask(%q, %d) = %v, %v", tc.mask, tc.vcpus, got, err)
		}
	}
}
