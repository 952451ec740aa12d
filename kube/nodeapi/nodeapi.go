// Package nodeapi is the contract between kemu-api and the node agents'
// API: an HTTPS server on every node agent, mutually authenticated with
// kemu's node CA (kube/migrationca), through which kemu-api reaches the
// VMIs of that node — the serial console and VNC streams, the guest
// agent's reports and the VMI's resource figures (stats). kemu-api
// presents a client certificate with ClientCommonName; a node agent
// presents its node certificate (its node's name), so kemu-api knows it
// reached the VMI's node and the node agent knows only kemu-api called.
//
// Requests: METHOD https://<node agent Pod IP>:<Port>/v1/namespaces/NS/virtualmachineinstances/NAME/VERB
// with header UIDHeader naming the VMI's UID (the node agent refuses a VMI
// that is not the one kemu-api authorized). Streams (console, vnc) are an
// HTTP/1.1 Upgrade to StreamUpgrade; after the 101 both directions carry
// the raw bytes.
package nodeapi

import "path"

const (
	// DefaultPort is the node agent's API port (--api-addr).
	DefaultPort = 8187
	// PortName names the port in the node agent's Pod.
	PortName = "api"

	// ClientCommonName is kemu-api's identity in its client certificate.
	// A colon cannot occur in a Node name, so no node certificate has it.
	ClientCommonName = "system:kemu-api"

	// UIDHeader carries the VMI's UID.
	UIDHeader = "X-Kemu-Vmi-Uid"
	// StreamUpgrade is the Upgrade token of the console and vnc streams.
	StreamUpgrade = "kemu-stream"

	// The verbs the node agent serves.
	Console        = "console"
	VNC            = "vnc"
	GuestOSInfo    = "guestosinfo"
	UserList       = "userlist"
	FilesystemList = "filesystemlist"
	// Stats is the VMI's resource figures of now (no guest agent needed).
	Stats = "stats"
)

// Path is the node agent API path of verb on the VMI namespace/name.
func Path(namespace, name, verb string) string {
	return path.Join("/v1/namespaces", namespace, "virtualmachineinstances", name, verb)
}

// AgentLabel selects the node agent Pods in kemu's namespace (the
// DaemonSet's Pod label in deploy/base/nodeagent.yaml).
const AgentLabel = "app.kubernetes.io/name=kemu-nodeagent"
