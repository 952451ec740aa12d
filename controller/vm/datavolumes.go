package vm

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/cdi"
	"github.com/kemu-dev/kemu/kube/vmistatus"
)

// Reasons of the VM's events and Failure condition about its
// dataVolumeTemplates (KubeVirt's where it has them).
const (
	ReasonDataVolumeCreated      = "SuccessfulDataVolumeCreate"
	ReasonFailedDataVolumeCreate = "FailedDataVolumeCreate"
	ReasonFailedDataVolumeImport = vmistatus.ReasonFailedDataVolumeImport
	// ReasonDataVolumeConflict: a DataVolume of a template's name is
	// controlled by another object.
	ReasonDataVolumeConflict = "DataVolumeConflict"
	// ReasonCDINotInstalled: the VM has dataVolumeTemplates and CDI's API
	// is not installed.
	ReasonCDINotInstalled = "CDINotInstalled"
)

// dataVolumesReady creates the DataVolumes of the VM's templates that do
// not exist (owned by the VM, KubeVirt's handleDataVolumes), adopts
// orphans and says whether every one is ready for a VMI: Succeeded,
// PendingPopulation or WaitForFirstConsumer. It reports CDI missing, a
// DataVolume another object controls and a failed create as a syncError.
func (c *Controller) dataVolumesReady(ctx context.Context, key string, vm *v1.VirtualMachine) (bool, *syncError, error) {
	installed, known := c.cdiState()
	switch {
	case !known:
		c.queue.AddAfter(key, cdiRetry)
		return false, nil, nil
	case !installed:
		msg := fmt.Sprintf("spec.dataVolumeTemplates: CDI's API (%s %s) is not installed in the cluster", cdi.GroupVersion, cdi.Resource)
		c.recorder.Event(vm, corev1.EventTypeWarning, ReasonCDINotInstalled, msg)
		return false, &syncError{ReasonCDINotInstalled, msg}, nil
	}
	ready := true
	for i := range vm.Spec.DataVolumeTemplates {
		t := &vm.Spec.DataVolumeTemplates[i]
		dv, found, err := c.opts.DataVolumes.Get(vm.Namespace, t.Name)
		if err != nil {
			return false, nil, fmt.Errorf("reading DataVolume %s/%s: %w", vm.Namespace, t.Name, err)
		}
		if !found {
			dv = nil
		}
		d := decideTemplate(vm, dv)
		switch d.action {
		case dvCreate:
			if serr := c.createDataVolume(ctx, vm, t); serr != nil {
				return false, serr, nil
			}
		case dvConflict:
			c.recorder.Event(vm, corev1.EventTypeWarning, ReasonDataVolumeConflict, d.conflict)
			return false, &syncError{ReasonDataVolumeConflict, d.conflict}, nil
		case dvAdopt:
			if err := c.adoptDataVolume(ctx, vm, dv); err != nil {
				return false, nil, err
			}
		}
		if d.failed {
			c.recorder.Eventf(vm, corev1.EventTypeWarning, ReasonFailedDataVolumeImport, "%s", dv.FailureMessage())
		}
		ready = ready && d.ready
	}
	return ready, nil, nil
}

// dvAction is what the VM controller does with a template's DataVolume.
type dvAction int

const (
	// dvOwned: the VM controls it; nothing to do.
	dvOwned dvAction = iota
	// dvCreate: there is none; create it.
	dvCreate
	// dvAdopt: an orphan of the template's name; the VM becomes its
	// controller.
	dvAdopt
	// dvConflict: another object controls it; the VM reports it and
	// waits.
	dvConflict
)

// templateDecision is decideTemplate's answer.
type templateDecision struct {
	action dvAction
	// ready: the DataVolume lets a VMI be created (Succeeded,
	// PendingPopulation or WaitForFirstConsumer).
	ready bool
	// failed: the DataVolume is Failed.
	failed bool
	// conflict says who controls it (dvConflict).
	conflict string
}

// decideTemplate decides on the DataVolume of one of the VM's templates,
// dv as the cache holds it (nil: none), as KubeVirt's handleDataVolumes
// does.
func decideTemplate(vm *v1.VirtualMachine, dv *cdi.DataVolume) templateDecision {
	if dv == nil {
		return templateDecision{action: dvCreate}
	}
	var d templateDecision
	switch ref := ownerOf(dv.OwnerReferences); {
	case ref != nil && ref.UID == vm.UID:
		d.action = dvOwned
	case ref != nil:
		return templateDecision{action: dvConflict,
			conflict: fmt.Sprintf("DataVolume %s/%s is controlled by %s %s, not by this VM", dv.Namespace, dv.Name, ref.Kind, ref.Name)}
	default:
		d.action = dvAdopt
	}
	switch dv.Phase {
	case cdi.PhaseSucceeded, cdi.PhasePendingPopulation, cdi.PhaseWaitForFirstConsumer:
		d.ready = true
	case cdi.PhaseFailed:
		d.failed = true
	}
	return d
}

func ownerOf(refs []metav1.OwnerReference) *metav1.OwnerReference {
	for i := range refs {
		if refs[i].Controller != nil && *refs[i].Controller {
			return &refs[i]
		}
	}
	return nil
}

// newDataVolume renders a template as KubeVirt does: its name and labels
// (plus the VM's UID under kemu's created-by label), its annotations (plus
// CDI's allowClaimAdoption), the VM's namespace, the VM as controller, and
// the spec as given.
func newDataVolume(vm *v1.VirtualMachine, t *v1.DataVolumeTemplateSpec) (*unstructured.Unstructured, error) {
	var spec map[string]any
	if err := json.Unmarshal(t.Spec.Raw, &spec); err != nil {
		return nil, fmt.Errorf("spec.dataVolumeTemplates %s: spec: %w", t.Name, err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(cdi.GVK)
	u.SetName(t.Name)
	u.SetNamespace(vm.Namespace)
	labels := maps.Clone(t.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[launcherpod.CreatedByLabel] = string(vm.UID)
	u.SetLabels(labels)
	annotations := maps.Clone(t.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[cdi.AllowClaimAdoptionAnnotation] = "true"
	u.SetAnnotations(annotations)
	u.SetOwnerReferences([]metav1.OwnerReference{*metav1.NewControllerRef(vm, vmKind)})
	return u, nil
}

func (c *Controller) createDataVolume(ctx context.Context, vm *v1.VirtualMachine, t *v1.DataVolumeTemplateSpec) *syncError {
	u, err := newDataVolume(vm, t)
	if err != nil {
		return &syncError{ReasonFailedDataVolumeCreate, err.Error()}
	}
	_, err = c.opts.DataVolumes.Resource().Namespace(vm.Namespace).Create(ctx, u, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil // the cache lags; its event requeues the VM
	case apierrors.IsNotFound(err):
		c.opts.DataVolumes.Recheck() // CDI's API went away?
		fallthrough
	case err != nil:
		msg := fmt.Sprintf("creating DataVolume %s/%s: %v", vm.Namespace, t.Name, err)
		c.recorder.Eventf(vm, corev1.EventTypeWarning, ReasonFailedDataVolumeCreate, "Error creating DataVolume %s: %v", t.Name, err)
		return &syncError{ReasonFailedDataVolumeCreate, msg}
	}
	klog.InfoS("Created DataVolume", "vm", klog.KObj(vm), "dataVolume", t.Name)
	c.recorder.Eventf(vm, corev1.EventTypeNormal, ReasonDataVolumeCreated, "Created DataVolume %s", t.Name)
	return nil
}

// adoptDataVolume makes the VM the controller of an orphan DataVolume of a
// template's name, as KubeVirt's ClaimMatchedDataVolumes does.
func (c *Controller) adoptDataVolume(ctx context.Context, vm *v1.VirtualMachine, dv *cdi.DataVolume) error {
	refs := append(slices.Clone(dv.OwnerReferences), *metav1.NewControllerRef(vm, vmKind))
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": dv.UID},
		{"op": "test", "path": "/metadata/resourceVersion", "value": dv.ResourceVersion},
		{"op": "add", "path": "/metadata/ownerReferences", "value": refs},
	})
	if err != nil {
		return err
	}
	if _, err := c.opts.DataVolumes.Resource().Namespace(dv.Namespace).Patch(ctx, dv.Name, types.JSONPatchType, patch,
		metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("adopting DataVolume %s/%s: %w", dv.Namespace, dv.Name, err)
	}
	klog.InfoS("Adopted orphan DataVolume", "vm", klog.KObj(vm), "dataVolume", dv.Name)
	return nil
}

// cdiState is CDI's installation as the controller acts on it: without a
// Watcher, never installed.
func (c *Controller) cdiState() (installed, ready bool) {
	if c.opts.DataVolumes == nil {
		return false, true
	}
	return c.opts.DataVolumes.State()
}

// dataVolumeEvent queues the VM controlling a DataVolume and the VMs
// naming it: in a template (an orphan to adopt, or another's: a conflict)
// or in a dataVolume volume (their printableStatus reads it).
func (c *Controller) dataVolumeEvent(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	if ref := ownerOf(u.GetOwnerReferences()); ref != nil && ref.Kind == vmKind.Kind && ref.APIVersion == v1.APIVersion {
		c.queue.Add(u.GetNamespace() + "/" + ref.Name)
	}
	vms, err := c.vmLister.VirtualMachines(u.GetNamespace()).List(labelsEverything)
	if err != nil {
		return
	}
	for _, vm := range vms {
		if namesDataVolume(vm, u.GetName()) {
			c.enqueue(vm)
		}
	}
}

// namesDataVolume says whether the VM has a dataVolumeTemplate or a
// template dataVolume volume of that name.
func namesDataVolume(vm *v1.VirtualMachine, name string) bool {
	if slices.ContainsFunc(vm.Spec.DataVolumeTemplates, func(t v1.DataVolumeTemplateSpec) bool { return t.Name == name }) {
		return true
	}
	return vm.Spec.Template != nil && slices.ContainsFunc(vm.Spec.Template.Spec.Volumes, func(v v1.Volume) bool {
		return v.DataVolume != nil && v.DataVolume.Name == name
	})
}

// templateDataVolumes returns the DataVolumes of the template's dataVolume
// volumes that the cache holds (none while CDI's API is not installed or
// its cache has not synced), for the VM's printableStatus.
func (c *Controller) templateDataVolumes(vm *v1.VirtualMachine) []*cdi.DataVolume {
	if c.opts.DataVolumes == nil || vm.Spec.Template == nil {
		return nil
	}
	if installed, ready := c.opts.DataVolumes.State(); !installed || !ready {
		return nil
	}
	var out []*cdi.DataVolume
	for _, vol := range vm.Spec.Template.Spec.Volumes {
		if vol.DataVolume == nil {
			continue
		}
		if dv, found, err := c.opts.DataVolumes.Get(vm.Namespace, vol.DataVolume.Name); err == nil && found {
			out = append(out, dv)
		}
	}
	return out
}

var labelsEverything = labels.Everything()

// cdiRetry: a re-check while CDI's installation is not known yet.
const cdiRetry = time.Second

// enqueueWithTemplates queues every VM with dataVolumeTemplates (CDI came
// or went).
func (c *Controller) enqueueWithTemplates() {
	vms, err := c.vmLister.List(labelsEverything)
	if err != nil {
		return
	}
	for _, vm := range vms {
		if len(vm.Spec.DataVolumeTemplates) > 0 {
			c.enqueue(vm)
		}
	}
}
