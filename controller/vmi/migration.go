package vmi

// Issue 17: what the VMI controller must know about live migration. The
// migration controller (controller/migration) creates a target Pod beside
// the VMI's launcher Pod and, at the end, names it status.launcherPod; the
// source Pod then ends. Neither Pod may end the VMI on its way.

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// isMigrationTarget: the Pod is a migration's target Pod (never the VMI's
// launcher Pod until the migration controller names it so).
func isMigrationTarget(pod *corev1.Pod) bool {
	return pod.Labels[launcherpod.MigrationUIDLabel] != ""
}

// migratedAway says whether the VM left the launcher Pod podName by a live
// migration: the VMI's launcher Pod already is another Pod, or its
// migrationState names podName as the source of a migration that completed
// (and did not fail). Such a Pod's end or disappearance never ends the VMI.
func migratedAway(vmi *v1.VirtualMachineInstance, podName string) bool {
	if podName == "" {
		return false
	}
	if vmi.Status.LauncherPod != "" && vmi.Status.LauncherPod != podName {
		return true
	}
	ms := vmi.Status.MigrationState
	return ms != nil && ms.SourcePod == podName && ms.Completed && !ms.Failed
}
