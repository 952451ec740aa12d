package template

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// podProbe renders a VMI probe (defaulted) as the compute container's
// probe, as KubeVirt's template service: httpGet and tcpSocket as they are
// (the kubelet reaches the guest through the Pod's address), exec and
// guestAgentPing as an exec probe running kemu-launcher's probe subcommand
// (launcherpod.Probe) with the timeout padded by
// launcherpod.ProbeTimeoutPadding. Timing fields are carried over; unlike
// KubeVirt no startup delay is added (no libvirt to wait for: a check before
// the VM runs simply fails).
func podProbe(p *v1.Probe) *corev1.Probe {
	if p == nil {
		return nil
	}
	out := &corev1.Probe{
		InitialDelaySeconds: p.InitialDelaySeconds,
		TimeoutSeconds:      p.TimeoutSeconds,
		PeriodSeconds:       p.PeriodSeconds,
		SuccessThreshold:    p.SuccessThreshold,
		FailureThreshold:    p.FailureThreshold,
	}
	switch {
	case p.HTTPGet != nil:
		out.HTTPGet = p.HTTPGet.DeepCopy()
	case p.TCPSocket != nil:
		out.TCPSocket = p.TCPSocket.DeepCopy()
	case p.Exec != nil || p.GuestAgentPing != nil:
		timeout := max(p.TimeoutSeconds, 1)
		lp := launcherpod.Probe{SocketsDir: launcherpod.SocketsDir, Timeout: time.Duration(timeout) * time.Second,
			GuestAgentPing: p.GuestAgentPing != nil}
		if p.Exec != nil {
			lp.Command = append([]string(nil), p.Exec.Command...)
		}
		out.Exec = &corev1.ExecAction{Command: lp.ExecCommand()}
		out.TimeoutSeconds = timeout + launcherpod.ProbeTimeoutPadding
	}
	return out
}

// containerPorts are the VMI's interfaces' ports as the compute container's
// (KubeVirt's containerPortsFromVMI): probes and Services may name them.
func containerPorts(vmi *v1.VirtualMachineInstance) []corev1.ContainerPort {
	var ports []corev1.ContainerPort
	for _, i := range vmi.Spec.Domain.Devices.Interfaces {
		for _, p := range i.Ports {
			proto := corev1.ProtocolTCP
			if p.Protocol != "" {
				proto = corev1.Protocol(p.Protocol)
			}
			ports = append(ports, corev1.ContainerPort{Name: p.Name, ContainerPort: p.Port, Protocol: proto})
		}
	}
	return ports
}
