package v1alpha1

// VMIFinalizer keeps a VMI until its launcher Pod is gone, so the node
// agent and the launcher can shut the guest down (KubeVirt's
// foregroundDeleteVirtualMachine). kemu-api's admission adds it when the
// VMI is created (no write of its own), else the VMI controller before it
// creates the Pod; the controller removes it.
const VMIFinalizer = "kemu.dev/foregroundDeleteVirtualMachine"

// Node labels and annotations kemu's node agent writes and its controllers
// read.
const (
	// NodeSchedulableLabel is "true" on nodes whose node agent runs and has
	// registered its device plugins; launcher Pods select it. The node agent
	// sets "false" when it stops, the node controller when its heartbeat is
	// stale.
	NodeSchedulableLabel = "kemu.dev/schedulable"
	// NodeKVMLabel is "true" when the KVM probe booted a guest under KVM on
	// the node, "false" otherwise (guests run under TCG there).
	NodeKVMLabel = "kemu.dev/kvm"
	// NodeHeartbeatAnnotation is the RFC 3339 time of the node agent's last
	// heartbeat.
	NodeHeartbeatAnnotation = "kemu.dev/heartbeat"
	// NodeMachineTypeLabelPrefix followed by a machine type ("pc-q35-7.2",
	// "q35") is "true" on nodes whose QEMU lists that machine type
	// (`-machine help`), as KubeVirt's machine-type.node.kubevirt.io/ labels
	// (under kemu.dev/: the node agent may write no other labels).
	NodeMachineTypeLabelPrefix = "kemu.dev/machine-type-"
)

// MachineTypeNodeSelector is the node label a launcher Pod selects for the
// VMI's machine type: only a versioned one (pc-q35-X.Y, pc-i440fx-X.Y),
// which not every QEMU has; the aliases q35 and pc exist in all.
func MachineTypeNodeSelector(machine string) (label string, ok bool) {
	if machine == "" || UniversalMachineType(machine) {
		return "", false
	}
	return NodeMachineTypeLabelPrefix + machine, true
}

// UniversalMachineType says whether every x86_64 QEMU has the machine
// type: the unversioned aliases q35 and pc (each the newest of its kind).
func UniversalMachineType(machine string) bool { return machine == "q35" || machine == "pc" }

// Requests a user makes of a running VMI through annotations, reconciled
// by the node agent on the VMI's node (there are no subresources without an
// aggregated API server). kemuctl pause|unpause|soft-reboot set them.
const (
	// VMIPausedAnnotation "true" asks for the guest to be paused; absent or
	// "false" for it to run. The VMI's Paused condition reports the result.
	VMIPausedAnnotation = "kemu.dev/paused"
	// VMISoftRebootAnnotation asks for one soft reboot (through the guest
	// agent, else ACPI) per distinct value; use a timestamp or a random
	// string. The node agent records the value it acted on in
	// VMISoftRebootDoneAnnotation.
	VMISoftRebootAnnotation     = "kemu.dev/soft-reboot"
	VMISoftRebootDoneAnnotation = "kemu.dev/soft-reboot-done"
)
