package template

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func TestRenderProbesAndPodFields(t *testing.T) {
	svc := NewService(Options{LauncherImage: "l"})
	timing := func(p v1.Probe) v1.Probe {
		p.InitialDelaySeconds, p.TimeoutSeconds, p.PeriodSeconds, p.SuccessThreshold, p.FailureThreshold = 5, 2, 7, 1, 4
		return p
	}
	for _, tc := range []struct {
		name      string
		mod       func(*v1.VirtualMachineInstance)
		readiness *corev1.Probe
		liveness  *corev1.Probe
		hostname  string
		ports     []corev1.ContainerPort
		subdomain string
		priority  string
		scheduler string
	}{
		{name: "none", mod: func(*v1.VirtualMachineInstance) {}, hostname: "vm1"},
		{name: "httpGet and tcpSocket as they are, interface ports as container ports",
			mod: func(x *v1.VirtualMachineInstance) {
				x.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", Masquerade: &v1.InterfaceMasquerade{},
					Ports: []v1.Port{{Name: "http", Port: 80}, {Port: 53, Protocol: "UDP"}}}}
				p := timing(v1.Probe{Handler: v1.Handler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("http"), Path: "/", Scheme: "HTTP"}}})
				x.Spec.ReadinessProbe = &p
				l := v1.Probe{Handler: v1.Handler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(22)}}}
				x.Spec.LivenessProbe = &l
			},
			readiness: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("http"), Path: "/", Scheme: "HTTP"}},
				InitialDelaySeconds: 5, TimeoutSeconds: 2, PeriodSeconds: 7, SuccessThreshold: 1, FailureThreshold: 4},
			liveness: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(22)}},
				TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3},
			ports:    []corev1.ContainerPort{{Name: "http", ContainerPort: 80, Protocol: "TCP"}, {ContainerPort: 53, Protocol: "UDP"}},
			hostname: "vm1"},
		{name: "exec and guestAgentPing through kemu-launcher probe, timeout padded",
			mod: func(x *v1.VirtualMachineInstance) {
				p := timing(v1.Probe{Handler: v1.Handler{Exec: &corev1.ExecAction{Command: []string{"cat", "/tmp/ready"}}}})
				x.Spec.ReadinessProbe = &p
				l := v1.Probe{Handler: v1.Handler{GuestAgentPing: &v1.GuestAgentPing{}}, TimeoutSeconds: 1}
				x.Spec.LivenessProbe = &l
			},
			readiness: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"kemu-launcher", "probe",
				"--sockets-dir=/var/run/kemu/sockets", "--timeout-seconds=2", "--", "cat", "/tmp/ready"}}},
				InitialDelaySeconds: 5, TimeoutSeconds: 3, PeriodSeconds: 7, SuccessThreshold: 1, FailureThreshold: 4},
			liveness: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"kemu-launcher", "probe",
				"--sockets-dir=/var/run/kemu/sockets", "--timeout-seconds=1", "--guest-agent-ping=true"}}},
				TimeoutSeconds: 2, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3},
			hostname: "vm1"},
		{name: "pod fields",
			mod: func(x *v1.VirtualMachineInstance) {
				x.Spec.Hostname, x.Spec.Subdomain, x.Spec.PriorityClassName, x.Spec.SchedulerName = "web-1", "web", "high", "sched"
			},
			hostname: "web-1", subdomain: "web", priority: "high", scheduler: "sched"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod, err := svc.Render(Input{VMI: vmi("256Mi", tc.mod)})
			if err != nil {
				t.Fatal(err)
			}
			c := pod.Spec.Containers[0]
			if !reflect.DeepEqual(c.ReadinessProbe, tc.readiness) {
				t.Errorf("readinessProbe = %+v, want %+v", c.ReadinessProbe, tc.readiness)
			}
			if !reflect.DeepEqual(c.LivenessProbe, tc.liveness) {
				t.Errorf("livenessProbe = %+v, want %+v", c.LivenessProbe, tc.liveness)
			}
			if !reflect.DeepEqual(c.Ports, tc.ports) {
				t.Errorf("ports = %+v, want %+v", c.Ports, tc.ports)
			}
			s := pod.Spec
			if s.Hostname != tc.hostname || s.Subdomain != tc.subdomain || s.PriorityClassName != tc.priority || s.SchedulerName != tc.scheduler {
				t.Errorf("hostname %q subdomain %q priorityClassName %q schedulerName %q", s.Hostname, s.Subdomain, s.PriorityClassName, s.SchedulerName)
			}
		})
	}
}
