package vmi

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// LiveMigratable condition reasons (KubeVirt's).
const (
	ReasonInterfaceNotLiveMigratable = "InterfaceNotLiveMigratable"
	ReasonDisksNotLiveMigratable     = "DisksNotLiveMigratable"
	ReasonVirtIOFSNotLiveMigratable  = "VirtIOFSNotLiveMigratable"
	// ReasonNotMigratable is KubeVirt's generic reason; kemu gives it to
	// a VMI with a TPM (KubeVirt has no reason of its own for one).
	ReasonNotMigratable = "NotMigratable"
)

// pvcInfo is what LiveMigratable needs of a VMI's PVC: its access modes,
// or that it could not be read.
type pvcInfo struct {
	modes   []corev1.PersistentVolumeAccessMode
	missing bool
}

// liveMigratable is the VMI's LiveMigratable condition: False with
// InterfaceNotLiveMigratable for a bridge binding on the pod network (the
// guest holds the Pod's IP, which the target Pod does not have), False with
// VirtIOFSNotLiveMigratable for a filesystem, False with NotMigratable for
// a TPM (its migration is not shown yet), False with
// DisksNotLiveMigratable for a hostDisk (a file on this node) or a PVC both
// nodes cannot attach at once (not ReadWriteMany; ReadOnlyMany will do for
// a read-only volume and for an ephemeral volume's claim; a PVC not found),
// else True. The messages name the
// interface or volume.
func liveMigratable(vmi *v1.VirtualMachineInstance, pvcs map[string]pvcInfo) v1.VirtualMachineInstanceCondition {
	cond := v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionFalse}
	podNets := map[string]bool{}
	for _, n := range vmi.Spec.Networks {
		if n.Pod != nil || (n.Multus != nil && n.Multus.Default) { // the default Multus network is the Pod's primary one
			podNets[n.Name] = true
		}
	}
	for _, iface := range vmi.Spec.Domain.Devices.Interfaces {
		if iface.Bridge != nil && podNets[iface.Name] {
			cond.Reason = ReasonInterfaceNotLiveMigratable
			cond.Message = fmt.Sprintf("cannot migrate VMI: interface %s uses the bridge binding on the pod network (the guest holds the Pod's IP)", iface.Name)
			return cond
		}
	}
	if fss := vmi.Spec.Domain.Devices.Filesystems; len(fss) > 0 {
		// QEMU 7.2's vhost-user-fs device is unmigratable (its state lives
		// in virtiofsd), whatever the volume: KubeVirt's reason.
		cond.Reason = ReasonVirtIOFSNotLiveMigratable
		cond.Message = fmt.Sprintf("cannot migrate VMI: filesystem %s is shared with virtiofs, and QEMU cannot migrate a vhost-user-fs device", fss[0].Name)
		return cond
	}
	if v1.HasTPM(&vmi.Spec) {
		// QEMU's tpm-emulator carries swtpm's state in the migration
		// stream, but kemu has not shown a TPM surviving a migration yet.
		cond.Reason = ReasonNotMigratable
		cond.Message = "cannot migrate VMI: it has a TPM (domain.devices.tpm), and kemu does not migrate swtpm's state yet"
		if v1.HasPersistentTPM(&vmi.Spec) {
			// Its state is on the VM's backend storage claim, which
			// KubeVirt needs ReadWriteMany (or copies) to migrate.
			cond.Message = fmt.Sprintf("cannot migrate VMI: its TPM is persistent (domain.devices.tpm.persistent), "+
				"its state on the backend storage claim %s, and kemu migrates neither swtpm's state nor that claim yet",
				launcherpod.BackendStoragePVCName(vmi.Name))
		}
		return cond
	}
	var bad []string
	for _, vol := range vmi.Spec.Volumes {
		switch {
		case vol.HostDisk != nil:
			bad = append(bad, fmt.Sprintf("volume %s is a hostDisk (a file on the node)", vol.Name))
		case vol.PersistentVolumeClaim != nil, vol.DataVolume != nil, vol.Ephemeral != nil:
			// An ephemeral volume's claim is only read (under the
			// overlay each node has): ReadOnlyMany will do.
			claim, readOnly, _ := v1.VolumeClaim(&vol)
			info := pvcs[claim]
			switch {
			case info.missing:
				bad = append(bad, fmt.Sprintf("volume %s: PVC %s was not found", vol.Name, claim))
			case slices.Contains(info.modes, corev1.ReadWriteMany):
			case readOnly && slices.Contains(info.modes, corev1.ReadOnlyMany):
			default:
				bad = append(bad, fmt.Sprintf("volume %s: PVC %s is not shared (access modes %v; live migration needs ReadWriteMany)", vol.Name, claim, info.modes))
			}
		}
	}
	if len(bad) > 0 {
		cond.Reason = ReasonDisksNotLiveMigratable
		cond.Message = "cannot migrate VMI: " + strings.Join(bad, "; ")
		return cond
	}
	cond.Status = corev1.ConditionTrue
	return cond
}

// pvcCache is the PVC information of one VMI generation; a missing PVC is
// asked again after pvcRecheck.
type pvcCache struct {
	generation int64
	at         time.Time
	pvcs       map[string]pvcInfo
}

const pvcRecheck = 30 * time.Second

// vmiPVCs reads the access modes of the VMI's PVCs (once per VMI
// generation: a PVC's access modes do not change).
func (c *Controller) vmiPVCs(ctx context.Context, key string, vmi *v1.VirtualMachineInstance) (map[string]pvcInfo, error) {
	c.mu.Lock()
	cached, ok := c.pvcs[key]
	c.mu.Unlock()
	if ok && cached.generation == vmi.Generation {
		fresh := true
		for _, p := range cached.pvcs {
			fresh = fresh && (!p.missing || time.Since(cached.at) < pvcRecheck)
		}
		if fresh {
			return cached.pvcs, nil
		}
	}
	out := map[string]pvcInfo{}
	for _, vol := range vmi.Spec.Volumes {
		claim, _, ok := v1.VolumeClaim(&vol)
		if !ok {
			continue
		}
		pvc, err := c.cfg.KubeClient.CoreV1().PersistentVolumeClaims(vmi.Namespace).Get(ctx, claim, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			out[claim] = pvcInfo{missing: true}
		case err != nil:
			return nil, fmt.Errorf("reading PVC %s: %w", claim, err)
		default:
			out[claim] = pvcInfo{modes: pvc.Spec.AccessModes}
		}
	}
	c.mu.Lock()
	c.pvcs[key] = pvcCache{generation: vmi.Generation, at: time.Now(), pvcs: out}
	c.mu.Unlock()
	return out, nil
}
