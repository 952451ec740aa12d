package subresource

import (
	"net/http"

	"github.com/kemu-dev/kemu/api/subresources"
	"github.com/kemu-dev/kemu/kube/nodeapi"
)

// stats serves a running VMI's resource figures: the node agent of its
// node reads them from the launcher at the time of the request (no guest
// agent needed) and kemu-api passes them on as they came.
func (h *Handler) stats(w http.ResponseWriter, r *http.Request, ns, name string) {
	ctx := r.Context()
	vmi, err := h.runningVMI(ctx, ns, name)
	if err != nil {
		writeError(w, err)
		return
	}
	var out subresources.VirtualMachineInstanceStats
	if err := h.Nodes.Get(ctx, vmi, nodeapi.Stats, &out); err != nil {
		writeError(w, apiError(ctx, nodeapi.Stats+" from node "+vmi.Status.NodeName, err))
		return
	}
	out.Kind, out.APIVersion = subresources.StatsKind, subresources.GroupVersion
	writeJSON(w, http.StatusOK, &out)
}
