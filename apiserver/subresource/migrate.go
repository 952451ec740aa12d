package subresource

import (
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/subresources"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// migrate creates a VirtualMachineInstanceMigration for the VMI and
// replies with it. A VMI that is not running is refused here; the
// migration controller decides whether a running one can move.
func (h *Handler) migrate(w http.ResponseWriter, r *http.Request, ns, name string) {
	ctx := r.Context()
	var o subresources.MigrateOptions
	dryRun, err := readOptions(r, &o, func() []string { return o.DryRun })
	if err != nil {
		writeError(w, err)
		return
	}
	// A VMI that does not run cannot move (virt-api's test too); whether
	// a running one can is the migration controller's call.
	vmi, err := h.runningVMI(ctx, ns, name)
	if err != nil {
		writeError(w, err)
		return
	}
	vmim := &v1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: vmi.Name + "-migration-"},
		Spec:       v1.VirtualMachineInstanceMigrationSpec{VMIName: vmi.Name},
	}
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	created, err := h.Kemu.KemuV1alpha1().VirtualMachineInstanceMigrations(ns).Create(ctx, vmim, opts)
	if err != nil {
		writeError(w, apiError(ctx, "creating the migration", err))
		return
	}
	klog.FromContext(ctx).Info("Created a migration", "migration", created.Name, "dryRun", dryRun)
	created.TypeMeta = metav1.TypeMeta{Kind: "VirtualMachineInstanceMigration", APIVersion: v1.SchemeGroupVersion.String()}
	writeJSON(w, http.StatusOK, created)
}
