package subresource

import (
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kemu-dev/kemu/api/subresources"
)

// guest serves guestosinfo, userlist and filesystemlist: the node agent
// asks the guest agent through the launcher.
func (h *Handler) guest(w http.ResponseWriter, r *http.Request, verb subresources.Verb, ns, name string) {
	ctx := r.Context()
	vmi, err := h.runningVMI(ctx, ns, name)
	if err != nil {
		writeError(w, err)
		return
	}
	var out any
	var tm *metav1.TypeMeta
	switch verb {
	case subresources.GuestOSInfoVerb:
		v := &subresources.GuestAgentInfo{}
		out, tm = v, &v.TypeMeta
	case subresources.UserListVerb:
		v := &subresources.GuestOSUserList{}
		out, tm = v, &v.TypeMeta
	default:
		v := &subresources.FileSystemList{}
		out, tm = v, &v.TypeMeta
	}
	if err := h.Nodes.Get(ctx, vmi, verb.Name, out); err != nil {
		writeError(w, apiError(ctx, verb.Name+" from node "+vmi.Status.NodeName, err))
		return
	}
	*tm = metav1.TypeMeta{Kind: replyKinds[verb.Name], APIVersion: subresources.GroupVersion}
	writeJSON(w, http.StatusOK, out)
}

// replyKinds are the replies' kinds, KubeVirt's type names.
var replyKinds = map[string]string{
	subresources.GuestOSInfoVerb.Name:    "VirtualMachineInstanceGuestAgentInfo",
	subresources.UserListVerb.Name:       "VirtualMachineInstanceGuestOSUserList",
	subresources.FilesystemListVerb.Name: "VirtualMachineInstanceFileSystemList",
}
