// Package subresources is the contract of kemu-api's aggregated API,
// subresources.kemu.dev/v1alpha1, shared by kemu-api (which serves it) and
// kemuctl (which calls it): the group, the resources and their verbs, the
// HTTP methods, the WebSocket subprotocol of the console and VNC streams,
// and the request and reply bodies. Names and meanings follow KubeVirt's
// subresources.kubevirt.io.
//
// Paths are the Kubernetes API's:
//
//	/apis/subresources.kemu.dev/v1alpha1/namespaces/NS/virtualmachineinstances/NAME/VERB
//	/apis/subresources.kemu.dev/v1alpha1/namespaces/NS/virtualmachines/NAME/VERB
//	/apis/subresources.kemu.dev/v1alpha1/version
//
// so kube-apiserver authorizes them as the subresource VERB of the resource
// in the group subresources.kemu.dev: `get virtualmachineinstances/console`,
// `update virtualmachineinstances/pause`, `update virtualmachines/start`.
package subresources

import (
	"net/http"
	"path"
)

const (
	// Group and Version of the aggregated API.
	Group        = "subresources.kemu.dev"
	Version      = "v1alpha1"
	GroupVersion = Group + "/" + Version

	// APIServiceName is the APIService registering the group with kube-apiserver.
	APIServiceName = Version + "." + Group

	// VMIs and VMs are the resources the subresources hang off.
	VMIs = "virtualmachineinstances"
	VMs  = "virtualmachines"

	// VersionResource is the cluster-scoped version endpoint (GET):
	// /apis/subresources.kemu.dev/v1alpha1/version.
	VersionResource = "version"

	// StreamProtocol is the WebSocket subprotocol of the console and vnc
	// subresources: binary messages carry the raw bytes both ways (the
	// serial console's, the RFB protocol's). A close frame's reason says
	// why the stream ended.
	StreamProtocol = "plain.kemu.dev"
	// MaxStreamMessage is the largest message kemu-api takes from a
	// client on a stream; a larger one closes the stream (1009). Clients
	// split what they send.
	MaxStreamMessage = 64 << 10
)

// A Verb is one subresource: its name, the resource it belongs to and the
// HTTP method it answers (GET is authorized as `get`, PUT as `update`).
type Verb struct {
	Name     string
	Resource string
	Method   string
	// Stream marks the WebSocket streams (long-running requests).
	Stream bool
}

// The verbs, as KubeVirt names them.
var (
	Console            = Verb{Name: "console", Resource: VMIs, Method: http.MethodGet, Stream: true}
	VNC                = Verb{Name: "vnc", Resource: VMIs, Method: http.MethodGet, Stream: true}
	Pause              = Verb{Name: "pause", Resource: VMIs, Method: http.MethodPut}
	Unpause            = Verb{Name: "unpause", Resource: VMIs, Method: http.MethodPut}
	SoftReboot         = Verb{Name: "softreboot", Resource: VMIs, Method: http.MethodPut}
	GuestOSInfoVerb    = Verb{Name: "guestosinfo", Resource: VMIs, Method: http.MethodGet}
	UserListVerb       = Verb{Name: "userlist", Resource: VMIs, Method: http.MethodGet}
	FilesystemListVerb = Verb{Name: "filesystemlist", Resource: VMIs, Method: http.MethodGet}
	Migrate            = Verb{Name: "migrate", Resource: VMIs, Method: http.MethodPut}
	Start              = Verb{Name: "start", Resource: VMs, Method: http.MethodPut}
	Stop               = Verb{Name: "stop", Resource: VMs, Method: http.MethodPut}
	Restart            = Verb{Name: "restart", Resource: VMs, Method: http.MethodPut}
)

// StatsVerb is kemu's own (KubeVirt has none): a running VMI's resource
// figures of now (VirtualMachineInstanceStats), from its node agent.
var StatsVerb = Verb{Name: "stats", Resource: VMIs, Method: http.MethodGet}

// Verbs lists every verb, in the order discovery shows them.
var Verbs = []Verb{Console, VNC, Pause, Unpause, SoftReboot, GuestOSInfoVerb, UserListVerb, FilesystemListVerb, StatsVerb, Migrate, Start, Stop, Restart}

// Subresource is the verb's RBAC resource name, e.g. "virtualmachineinstances/console".
func (v Verb) Subresource() string { return v.Resource + "/" + v.Name }

// RBACVerb is the verb kube-apiserver authorizes the request as.
func (v Verb) RBACVerb() string {
	if v.Method == http.MethodGet {
		return "get"
	}
	return "update"
}

// Path is the verb's path on the API server for the object namespace/name.
func (v Verb) Path(namespace, name string) string {
	return path.Join("/apis", Group, Version, "namespaces", namespace, v.Resource, name, v.Name)
}

// VersionPath is the version endpoint's path.
func VersionPath() string { return path.Join("/apis", Group, Version, VersionResource) }

// Lookup returns the verb named name on resource.
func Lookup(resource, name string) (Verb, bool) {
	for _, v := range Verbs {
		if v.Resource == resource && v.Name == name {
			return v, true
		}
	}
	return Verb{}, false
}
