// Package v1alpha1 holds the kemu.dev/v1alpha1 API: VirtualMachineInstance,
// VirtualMachine and VirtualMachineInstanceMigration.
//
// JSON names and meanings mirror KubeVirt's kubevirt.io/v1 for the subset kemu
// supports, so a KubeVirt manifest ports by changing its apiVersion. KubeVirt
// fields that kemu does not implement are still declared (as [Unsupported]) so
// that they are rejected with an error naming them instead of being pruned.
//
// +kubebuilder:object:generate=true
// +groupName=kemu.dev
// +groupGoName=Kemu
package v1alpha1
