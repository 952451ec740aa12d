package validation

import (
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func TestValidateProbesAndPodFields(t *testing.T) {
	tcp := func(port intstr.IntOrString) *v1.Probe {
		return &v1.Probe{Handler: v1.Handler{TCPSocket: &corev1.TCPSocketAction{Port: port}}}
	}
	named := func(vmi *v1.VirtualMachineInstance) {
		vmi.Spec.Networks = []v1.Network{{Name: "default", Pod: &v1.PodNetwork{}}}
		vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", Masquerade: &v1.InterfaceMasquerade{},
			Ports: []v1.Port{{Name: "http", Port: 80}}}}
	}
	tests := []struct {
		name   string
		mutate func(*v1.VirtualMachineInstance)
		want   []string
	}{
		{name: "every handler alone", mutate: func(vmi *v1.VirtualMachineInstance) {
			named(vmi)
			vmi.Spec.ReadinessProbe = &v1.Probe{Handler: v1.Handler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("http"), Path: "/healthz",
				HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Probe", Value: "1"}}}}}
			vmi.Spec.LivenessProbe = &v1.Probe{Handler: v1.Handler{GuestAgentPing: &v1.GuestAgentPing{}}, InitialDelaySeconds: 30}
		}},
		{name: "exec and tcpSocket", mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.ReadinessProbe = &v1.Probe{Handler: v1.Handler{Exec: &corev1.ExecAction{Command: []string{"cat", "/tmp/ready"}}}}
			vmi.Spec.LivenessProbe = tcp(intstr.FromInt32(22))
		}},
		{name: "pod fields", mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Hostname, vmi.Spec.Subdomain = "web-1", "web"
			vmi.Spec.PriorityClassName, vmi.Spec.SchedulerName = "high.priority", "my-scheduler"
		}},
		{name: "bad pod fields", mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Hostname, vmi.Spec.Subdomain = "Web_1", "a.b"
			vmi.Spec.PriorityClassName, vmi.Spec.SchedulerName = "High", "-x"
		}, want: []string{"Invalid value spec.hostname", "Invalid value spec.priorityClassName", "Invalid value spec.schedulerName", "Invalid value spec.subdomain"}},
		{name: "no handler", mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.ReadinessProbe = &v1.Probe{}
		}, want: []string{"Required value spec.readinessProbe"}},
		{name: "two handlers", mutate: func(vmi *v1.VirtualMachineInstance) {
			p := tcp(intstr.FromInt32(22))
			p.GuestAgentPing = &v1.GuestAgentPing{}
			vmi.Spec.LivenessProbe = p
		}, want: []string{"Invalid value spec.livenessProbe"}},
		{name: "ports, host, scheme, path, header", mutate: func(vmi *v1.VirtualMachineInstance) {
			named(vmi)
			vmi.Spec.ReadinessProbe = &v1.Probe{Handler: v1.Handler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("nope"),
				Host: "10.0.0.1", Scheme: "FTP", Path: "x", HTTPHeaders: []corev1.HTTPHeader{{Name: "bad header"}}}}}
			vmi.Spec.LivenessProbe = tcp(intstr.FromInt32(70000))
		}, want: []string{
			"Invalid value spec.livenessProbe.tcpSocket.port",
			"Invalid value spec.readinessProbe.httpGet.host",
			"Invalid value spec.readinessProbe.httpGet.httpHeaders[0].name",
			"Invalid value spec.readinessProbe.httpGet.path",
			"Invalid value spec.readinessProbe.httpGet.port",
			"Unsupported value spec.readinessProbe.httpGet.scheme",
		}},
		{name: "tcpSocket without the pod network", mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Networks = []v1.Network{}
			vmi.Spec.Domain.Devices.AutoattachPodInterface = ptr(false)
			vmi.Spec.ReadinessProbe = tcp(intstr.FromInt32(22))
		}, want: []string{"Invalid value spec.readinessProbe.tcpSocket"}},
		{name: "liveness: successThreshold 1, not with startStrategy Paused", mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.LivenessProbe = &v1.Probe{Handler: v1.Handler{GuestAgentPing: &v1.GuestAgentPing{}}, SuccessThreshold: 2}
			vmi.Spec.StartStrategy = ptr(v1.StartStrategyPaused)
		}, want: []string{"Invalid value spec.livenessProbe.successThreshold", "Invalid value spec.startStrategy"}},
		{name: "exec command bounds", mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.ReadinessProbe = &v1.Probe{Handler: v1.Handler{Exec: &corev1.ExecAction{}}}
			vmi.Spec.LivenessProbe = &v1.Probe{Handler: v1.Handler{Exec: &corev1.ExecAction{Command: []string{"a\x00b", strings.Repeat("x", MaxProbeCommandBytes)}}},
				PeriodSeconds: MaxProbeSeconds + 1}
		}, want: []string{
			"Invalid value spec.livenessProbe.exec.command[0]",
			"Invalid value spec.livenessProbe.periodSeconds",
			"Required value spec.readinessProbe.exec.command",
			"Too long spec.livenessProbe.exec.command",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := baseVMI()
			tt.mutate(vmi)
			v1.SetVirtualMachineInstanceDefaults(vmi)
			errs := ValidateVirtualMachineInstance(vmi)
			got := errorKeys(errs)
			want := slices.Clone(tt.want)
			sort.Strings(want)
			if !slices.Equal(got, want) {
				t.Errorf("errors:\n got  %q\n want %q\nfull: %v", got, want, errs)
			}
		})
	}
}

func TestProbeDefaults(t *testing.T) {
	vmi := baseVMI()
	vmi.Spec.ReadinessProbe = &v1.Probe{Handler: v1.Handler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(80)}}}
	v1.SetVirtualMachineInstanceDefaults(vmi)
	p := vmi.Spec.ReadinessProbe
	if p.TimeoutSeconds != 1 || p.PeriodSeconds != 10 || p.SuccessThreshold != 1 || p.FailureThreshold != 3 ||
		p.HTTPGet.Scheme != corev1.URISchemeHTTP || p.HTTPGet.Path != "/" {
		t.Errorf("defaulted probe: %+v %+v", p, p.HTTPGet)
	}
}
