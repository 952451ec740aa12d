package template

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// withoutNetworkCapabilities drops launcherpod.NetworkCapabilities: a VMI
// with no tap needs none of them (NeedsTun).
func withoutNetworkCapabilities(caps []corev1.Capability) []corev1.Capability {
	return slices.DeleteFunc(caps, func(c corev1.Capability) bool { return slices.Contains(launcherpod.NetworkCapabilities, c) })
}

// usesPasst says whether any of vmi's interfaces is bound with passt.
func usesPasst(vmi *v1.VirtualMachineInstance) bool {
	return slices.ContainsFunc(vmi.Spec.Domain.Devices.Interfaces, func(i v1.Interface) bool { return i.UsesPasst() })
}

// seccompProfile is the compute container's seccomp profile: the runtime's
// default, or kemu's for a VMI with passt (launcherpod.PasstSeccompProfile,
// which the node agent installs: passt's sandbox needs pivot_root(2)).
func seccompProfile(vmi *v1.VirtualMachineInstance) *corev1.SeccompProfile {
	if usesPasst(vmi) {
		name := launcherpod.PasstSeccompProfile
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &name}
	}
	return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
}
