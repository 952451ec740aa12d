package migration

import (
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/controller/template"
)

// renderTarget renders m's target Pod: the VMI's launcher Pod as the
// template service renders it, with the choices made when the source Pod
// was rendered taken from the source Pod (KVM or TCG, block or file PVCs),
// the label launcherpod.MigrationUIDLabel, its own name, and — unless
// allowSameNode (tests only) — a required node affinity keeping it off the
// source node.
func renderTarget(tmpl *template.Service, m *v1.VirtualMachineInstanceMigration, vmi *v1.VirtualMachineInstance,
	source *corev1.Pod, allowSameNode bool) (*corev1.Pod, error) {
	defaulted := vmi.DeepCopy()
	v1.SetVirtualMachineInstanceDefaults(defaulted)
	in := template.Input{VMI: defaulted, KVM: requestsKVM(source), PVCBlock: blockClaims(source)}
	pod, err := tmpl.Render(in)
	if err != nil {
		return nil, fmt.Errorf("rendering the target Pod of migration %s/%s: %w", m.Namespace, m.Name, err)
	}
	pod.Name = launcherpod.MigrationTargetPodName(vmi, m.UID)
	pod.Labels[launcherpod.MigrationUIDLabel] = string(m.UID)
	if !allowSameNode && source.Spec.NodeName != "" {
		avoidNode(&pod.Spec, source.Spec.NodeName)
	}
	return pod, nil
}

// requestsKVM: the source Pod's compute container asks for
// devices.kemu.dev/kvm (the controller's KVM choice at render time).
func requestsKVM(pod *corev1.Pod) bool {
	for _, c := range pod.Spec.Containers {
		if c.Name != launcherpod.ComputeContainer {
			continue
		}
		if _, ok := c.Resources.Limits[launcherpod.ResourceKVM]; ok {
			return true
		}
	}
	return false
}

// blockClaims are the claims the source Pod attaches as block devices
// (launcherpod.PVCRoot/<claim>).
func blockClaims(pod *corev1.Pod) map[string]bool {
	out := map[string]bool{}
	for _, c := range pod.Spec.Containers {
		if c.Name != launcherpod.ComputeContainer {
			continue
		}
		for _, d := range c.VolumeDevices {
			if dir, claim := path.Split(d.DevicePath); strings.TrimSuffix(dir, "/") == launcherpod.PVCRoot {
				out[claim] = true
			}
		}
	}
	return out
}

// avoidNode adds a required node affinity against node: into every term
// the VMI's own affinity has (terms are ORed, requirements within a term
// ANDed), or as the only term.
func avoidNode(spec *corev1.PodSpec, node string) {
	req := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{node}}
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	sel := na.RequiredDuringSchedulingIgnoredDuringExecution
	if len(sel.NodeSelectorTerms) == 0 {
		sel.NodeSelectorTerms = []corev1.NodeSelectorTerm{{}}
	}
	for i := range sel.NodeSelectorTerms {
		sel.NodeSelectorTerms[i].MatchFields = append(sel.NodeSelectorTerms[i].MatchFields, req)
	}
}
