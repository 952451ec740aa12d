package v1alpha1

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
)
