package template

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// podQOS is Kubernetes' QoS class rule (k8s.io/kubernetes/pkg/apis/core/v1/helper/qos),
// enough of it for these Pods: Guaranteed when every container has CPU and
// memory limits equal to its requests.
func podQOS(pod *corev1.Pod) corev1.PodQOSClass {
	for _, c := range append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...) {
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, rok := c.Resources.Requests[r]
			lim, lok := c.Resources.Limits[r]
			if !lok || (rok && req.Cmp(lim) != 0) {
				return corev1.PodQOSBurstable
			}
		}
	}
	return corev1.PodQOSGuaranteed
}

func TestRenderPlacement(t *testing.T) {
	svc := NewService(Options{LauncherImage: "kemu.local/launcher:1"})
	q := func(s string) resource.Quantity { return resource.MustParse(s) }
	for _, tc := range []struct {
		name               string
		mod                func(*v1.VirtualMachineInstance)
		qos                corev1.PodQOSClass
		cpu, memory, pages string // the compute container's requests ("" = absent)
		hugepagesVolume    bool
		sysNice            bool
	}{
		{"shared", nil, corev1.PodQOSBurstable, "100m", "", "", false, false},
		{"dedicated", func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.CPU = &v1.CPU{Cores: 2, DedicatedCPUPlacement: true}
		}, corev1.PodQOSGuaranteed, "2", "", "", false, true},
		{"dedicated with emulator thread and hugepages", func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.CPU = &v1.CPU{Cores: 2, DedicatedCPUPlacement: true, IsolateEmulatorThread: true}
			v.Spec.Domain.Memory.Hugepages = &v1.Hugepages{PageSize: "2Mi"}
		}, corev1.PodQOSGuaranteed, "3", "overhead", "256Mi", true, true},
		{"hugepages only", func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Memory.Hugepages = &v1.Hugepages{PageSize: "2Mi"}
		}, corev1.PodQOSBurstable, "100m", "overhead", "256Mi", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := vmi("256Mi", tc.mod)
			pod, err := svc.Render(Input{VMI: x})
			if err != nil {
				t.Fatal(err)
			}
			if got := podQOS(pod); got != tc.qos {
				t.Errorf("QoS %s, want %s", got, tc.qos)
			}
			c := pod.Spec.Containers[0]
			if got := c.Resources.Requests[corev1.ResourceCPU]; got.Cmp(q(tc.cpu)) != 0 {
				t.Errorf("cpu request %s, want %s", got.String(), tc.cpu)
			}
			if tc.qos == corev1.PodQOSGuaranteed {
				if l := c.Resources.Limits[corev1.ResourceCPU]; l.Cmp(q(tc.cpu)) != 0 {
					t.Errorf("cpu limit %s, want %s", l.String(), tc.cpu)
				}
			}
			mem := c.Resources.Requests[corev1.ResourceMemory]
			if tc.memory == "overhead" && mem.Cmp(*Overhead(x, false)) != 0 {
				t.Errorf("memory request %s, want only the overhead %s", mem.String(), Overhead(x, false).String())
			}
			hp := launcherpod.HugepagesResource("2Mi")
			if tc.pages != "" {
				if r, l := c.Resources.Requests[hp], c.Resources.Limits[hp]; r.Cmp(q(tc.pages)) != 0 || l.Cmp(q(tc.pages)) != 0 {
					t.Errorf("hugepages-2Mi %s/%s, want %s", r.String(), l.String(), tc.pages)
				}
			} else if _, ok := c.Resources.Requests[hp]; ok {
				t.Errorf("hugepages requested")
			}
			var vol *corev1.Volume
			for i := range pod.Spec.Volumes {
				if pod.Spec.Volumes[i].Name == launcherpod.HugepagesVolume {
					vol = &pod.Spec.Volumes[i]
				}
			}
			mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == launcherpod.HugepagesVolume && m.MountPath == launcherpod.HugepagesDir
			})
			if (vol != nil) != tc.hugepagesVolume || mounted != tc.hugepagesVolume {
				t.Errorf("hugepages volume %v mounted %v, want %v", vol, mounted, tc.hugepagesVolume)
			}
			if vol != nil && (vol.EmptyDir == nil || vol.EmptyDir.Medium != "HugePages-2Mi") {
				t.Errorf("hugepages volume %+v", vol.VolumeSource)
			}
			if got := slices.Contains(c.SecurityContext.Capabilities.Add, "SYS_NICE"); got != tc.sysNice {
				t.Errorf("SYS_NICE %v, want %v", got, tc.sysNice)
			}
		})
	}
}
