// Package v1beta1 holds the instancetype.kemu.dev/v1beta1 API:
// VirtualMachineInstancetype and VirtualMachinePreference (namespaced),
// VirtualMachineClusterInstancetype and VirtualMachineClusterPreference
// (cluster-wide).
//
// JSON names and meanings mirror KubeVirt's instancetype.kubevirt.io/v1beta1,
// so a KubeVirt manifest ports by changing its apiVersion. Fields that
// describe what kemu's VirtualMachineInstance cannot express are declared as
// kemu's Unsupported types: they are refused with an error naming them,
// never pruned (docs/api.md).
//
// +kubebuilder:object:generate=true
// +groupName=instancetype.kemu.dev
// +groupGoName=Instancetype
package v1beta1
