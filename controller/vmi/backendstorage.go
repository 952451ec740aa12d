package vmi

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// Reasons of the backend storage (KubeVirt's).
const (
	// ReasonFailedBackendStorageCreate: the claim could not be created.
	ReasonFailedBackendStorageCreate = "FailedBackendStorageCreate"
	// ReasonBackendStorageNotReady: the claim is not bound (nor waiting
	// for its first consumer), is being deleted, or is lost.
	ReasonBackendStorageNotReady = "BackendStorageNotReady"
	// ReasonCreatedBackendStorage is the Normal event of its creation.
	ReasonCreatedBackendStorage = "SuccessfulCreate"
)

// backendStorageRetry: a safety re-check while a VMI waits for its backend
// storage claim (the claim's events requeue it sooner).
const backendStorageRetry = 30 * time.Second

// BackendStorage configures the claims the controller creates for VMs'
// persistent state (KubeVirt's vmStateStorageClass; kemu-config
// vmStateStorageClass and vmStateAccessMode).
type BackendStorage struct {
	// StorageClass of the claims; "": the cluster's default class
	// (storageClassName left unset: the DefaultStorageClass admission
	// plugin fills it in).
	StorageClass string
	// AccessMode of the claims; "": KubeVirt's rule without storage
	// profiles, ReadWriteMany when StorageClass is set, else
	// ReadWriteOnce.
	AccessMode corev1.PersistentVolumeAccessMode
}

// accessMode is the claims' access mode.
func (b BackendStorage) accessMode() corev1.PersistentVolumeAccessMode {
	switch {
	case b.AccessMode != "":
		return b.AccessMode
	case b.StorageClass != "":
		return corev1.ReadWriteMany
	}
	return corev1.ReadWriteOnce
}

// backendStorageClaim is the claim of vmi's VM (KubeVirt's backend
// storage PVC): persistent-state-for-<vm>, labelled with the VM's name, a
// 10Mi file system, owned by what owns the VMI (its VirtualMachine: the
// claim goes with the VM, and survives its VMIs) or, for a bare VMI, by
// the VMI itself (its state then lives as long as the VMI, as in
// KubeVirt).
func (c *Controller) backendStorageClaim(vmi *v1.VirtualMachineInstance) *corev1.PersistentVolumeClaim {
	owner := metav1.GetControllerOf(vmi)
	if owner == nil {
		owner = metav1.NewControllerRef(vmi, v1.SchemeGroupVersion.WithKind("VirtualMachineInstance"))
	}
	fs := corev1.PersistentVolumeFilesystem
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:            launcherpod.BackendStoragePVCName(vmi.Name),
			Namespace:       vmi.Namespace,
			Labels:          launcherpod.BackendStorageLabels(vmi.Name),
			OwnerReferences: []metav1.OwnerReference{*owner},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{c.cfg.BackendStorage.accessMode()},
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(launcherpod.BackendStorageSize)},
			},
			VolumeMode: &fs,
		},
	}
	if sc := c.cfg.BackendStorage.StorageClass; sc != "" {
		pvc.Spec.StorageClassName = &sc
	}
	return pvc
}

// backendStorage makes sure the backend storage claim of a VMI with a
// persistent TPM exists (creating it: a fixed name, so a create racing a
// stale cache ends in AlreadyExists, never in a second claim) and can be
// mounted: Bound, or Pending on a WaitForFirstConsumer class (the launcher
// Pod is its first consumer). It returns the claim's name and whether the
// launcher Pod may be created; while not, it records why on the VMI
// (Synchronized False, BackendStorageNotReady or
// FailedBackendStorageCreate; KubeVirt's reasons) and says when to look
// again. A VMI without a persistent TPM needs none: "", true.
func (c *Controller) backendStorage(ctx context.Context, vmi, defaulted *v1.VirtualMachineInstance) (string, bool, result, error) {
	if !v1.HasPersistentTPM(&defaulted.Spec) {
		return "", true, result{}, nil
	}
	want := c.backendStorageClaim(vmi)
	pvc, err := c.pvcLister.PersistentVolumeClaims(vmi.Namespace).Get(want.Name)
	if apierrors.IsNotFound(err) {
		pvc, err = c.cfg.KubeClient.CoreV1().PersistentVolumeClaims(vmi.Namespace).Create(ctx, want, metav1.CreateOptions{})
		switch {
		case apierrors.IsAlreadyExists(err):
			pvc, err = c.cfg.KubeClient.CoreV1().PersistentVolumeClaims(vmi.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
		case err == nil:
			c.cfg.Recorder.Eventf(vmi, corev1.EventTypeNormal, ReasonCreatedBackendStorage,
				"Created backend storage PVC %s (spec.domain.devices.tpm.persistent)", pvc.Name)
		default:
			msg := fmt.Sprintf("creating backend storage PVC %s (spec.domain.devices.tpm.persistent): %v", want.Name, err)
			c.cfg.Recorder.Event(vmi, corev1.EventTypeWarning, ReasonFailedBackendStorageCreate, msg)
			if serr := c.pendingBecause(ctx, vmi, ReasonFailedBackendStorageCreate, msg); serr != nil {
				klog.FromContext(ctx).Error(serr, "Recording the failed backend storage creation", "vmi", klog.KObj(vmi))
			}
			return "", false, result{}, fmt.Errorf("%s", msg)
		}
	}
	if err != nil {
		return "", false, result{}, fmt.Errorf("backend storage PVC %s/%s: %w", vmi.Namespace, want.Name, err)
	}
	why := ""
	switch {
	case pvc.DeletionTimestamp != nil:
		// A VM deleted and created again under the same name: its old
		// claim goes first (its events requeue the VMI).
		why = "is being deleted"
	case pvc.Status.Phase == corev1.ClaimBound:
	case pvc.Status.Phase == corev1.ClaimLost:
		why = "is Lost"
	default:
		wffc, err := c.bindsOnFirstConsumer(ctx, pvc)
		if err != nil {
			return "", false, result{}, err
		}
		if !wffc {
			why = "is not bound yet"
		}
	}
	if why != "" {
		msg := fmt.Sprintf("backend storage PVC %s (spec.domain.devices.tpm.persistent) %s", pvc.Name, why)
		return "", false, result{requeueAfter: backendStorageRetry}, c.pendingBecause(ctx, vmi, ReasonBackendStorageNotReady, msg)
	}
	return pvc.Name, true, result{}, nil
}

// pendingBecause keeps the VMI Pending with Synchronized False for reason.
func (c *Controller) pendingBecause(ctx context.Context, vmi *v1.VirtualMachineInstance, reason, msg string) error {
	return c.updateStatus(ctx, vmi, msg, func(vmi *v1.VirtualMachineInstance) {
		if vmi.Status.Phase == v1.VmPhaseUnset {
			setPhase(vmi, v1.Pending)
		}
		setCondition(vmi, condSynchronized(corev1.ConditionFalse, reason, msg))
	})
}
