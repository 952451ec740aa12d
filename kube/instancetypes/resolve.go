package instancetypes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	itv1beta1 "github.com/kemu-dev/kemu/api/instancetype/v1beta1"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
)

// Reasons of the VM's Failure condition (KubeVirt's).
const (
	ReasonFailedFindInstancetype = "FailedFindInstancetype"
	ReasonFailedFindPreference   = "FailedFindPreference"
)

// Error is a failure to resolve a matcher.
type Error struct {
	// Reason is ReasonFailedFindInstancetype or ReasonFailedFindPreference.
	Reason string
	// NotFound: the object, revision or claim does not exist (kemu-api's
	// admission lets a VM name an instance type created later, as
	// KubeVirt's does).
	NotFound bool
	Err      error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// errIgnorable marks inference failures the Ignore policy ignores: the
// volume is not a persistentVolumeClaim, or its claim lacks the label.
var errIgnorable = errors.New("ignorable")

// Resolved is what a VM's matchers refer to.
type Resolved struct {
	// Instancetype and Preference are the specs to expand with (nil: none).
	Instancetype *itv1beta1.VirtualMachineInstancetypeSpec
	Preference   *itv1beta1.VirtualMachinePreferenceSpec
	// InstancetypeRef and PreferenceRef are the VM's status references;
	// ControllerRevisionRef is nil until Store kept the live object.
	InstancetypeRef, PreferenceRef *v1.InstancetypeStatusRef
	// DropTemplateMemory: the instance type was inferred under the Ignore
	// policy, so the template's memory (the fallback for a failed
	// inference) gives way to it, as in KubeVirt.
	DropTemplateMemory bool

	instancetypeObj, preferenceObj runtime.Object
}

// family is what differs between instance types and preferences.
type family struct {
	reason               string
	kindOf               func(string) (string, bool)
	nameLabel, kindLabel string
	kinds                []string
}

var (
	instancetypes = family{ReasonFailedFindInstancetype, itv1beta1.InstancetypeKindOf,
		itv1beta1.DefaultInstancetypeLabel, itv1beta1.DefaultInstancetypeKindLabel,
		[]string{itv1beta1.KindInstancetype, itv1beta1.KindClusterInstancetype}}
	preferences = family{ReasonFailedFindPreference, itv1beta1.PreferenceKindOf,
		itv1beta1.DefaultPreferenceLabel, itv1beta1.DefaultPreferenceKindLabel,
		[]string{itv1beta1.KindPreference, itv1beta1.KindClusterPreference}}
)

type matcher struct {
	name, kind, revision, infer string
	policy                      *v1.InferFromVolumeFailurePolicy
}

func (m matcher) ignore() bool {
	return m.policy != nil && *m.policy == v1.IgnoreInferFromVolumeFailure
}

// Resolve finds the VM's instance type and preference. For each: the
// matcher's revisionName when set; else the revision in the VM's status
// when it was resolved for the same name and kind (or the same volume);
// else the live object, named or inferred from the volume's claim.
func (l *Lookup) Resolve(ctx context.Context, vm *v1.VirtualMachine) (*Resolved, error) {
	r := &Resolved{}
	if m := vm.Spec.Instancetype; m != nil {
		var spec itv1beta1.VirtualMachineInstancetypeSpec
		mt := matcher{m.Name, m.Kind, m.RevisionName, m.InferFromVolume, m.InferFromVolumeFailurePolicy}
		ref, obj, found, err := l.resolve(ctx, vm, instancetypes, mt, vm.Status.InstancetypeRef, &spec)
		if err != nil {
			return nil, err
		}
		if found {
			r.Instancetype, r.InstancetypeRef, r.instancetypeObj = &spec, ref, obj
			r.DropTemplateMemory = mt.infer != "" && mt.ignore()
		}
	}
	if m := vm.Spec.Preference; m != nil {
		var spec itv1beta1.VirtualMachinePreferenceSpec
		mt := matcher{m.Name, m.Kind, m.RevisionName, m.InferFromVolume, m.InferFromVolumeFailurePolicy}
		ref, obj, found, err := l.resolve(ctx, vm, preferences, mt, vm.Status.PreferenceRef, &spec)
		if err != nil {
			return nil, err
		}
		if found {
			r.Preference, r.PreferenceRef, r.preferenceObj = &spec, ref, obj
		}
	}
	return r, nil
}

// resolve decodes the spec into spec (a pointer to the family's spec type)
// and returns the status reference and, for a live object, the object.
// found is false when an ignorable inference failure left no object.
func (l *Lookup) resolve(ctx context.Context, vm *v1.VirtualMachine, f family, m matcher, old *v1.InstancetypeStatusRef,
	spec any) (ref *v1.InstancetypeStatusRef, obj runtime.Object, found bool, err error) {
	fail := func(err error) (*v1.InstancetypeStatusRef, runtime.Object, bool, error) {
		return nil, nil, false, &Error{Reason: f.reason, NotFound: apierrors.IsNotFound(err), Err: err}
	}
	kind, ok := f.kindOf(m.kind)
	if !ok {
		return fail(fmt.Errorf("unknown kind %q", m.kind))
	}
	ref = &v1.InstancetypeStatusRef{Name: m.name, Kind: kind, InferFromVolume: m.infer, InferFromVolumeFailurePolicy: m.policy}

	fromRevision := func(name string) (*v1.InstancetypeStatusRef, runtime.Object, bool, error) {
		rev, err := l.revision(ctx, vm.Namespace, name)
		if err != nil {
			return fail(fmt.Errorf("ControllerRevision %s: %w", name, err))
		}
		k, err := revisionSpec(rev, spec, f.kinds...)
		if err != nil {
			return fail(err)
		}
		if errs := checkSpec(spec); len(errs) > 0 {
			return fail(fmt.Errorf("%s %s (ControllerRevision %s): %w", k.Kind, k.Name, name, errs.ToAggregate()))
		}
		ref.ControllerRevisionRef = &v1.ControllerRevisionRef{Name: name}
		return ref, nil, true, nil
	}
	switch {
	case m.revision != "":
		return fromRevision(m.revision)
	case old != nil && old.ControllerRevisionRef != nil && old.ControllerRevisionRef.Name != "" && sameTarget(old, m, kind):
		ref.Name, ref.Kind = old.Name, old.Kind // inferred ones
		return fromRevision(old.ControllerRevisionRef.Name)
	}

	if m.infer != "" {
		name, k, err := l.infer(ctx, vm, f, m.infer)
		switch {
		case errors.Is(err, errIgnorable) && m.ignore():
			return nil, nil, false, nil
		case err != nil:
			return fail(err)
		}
		if kind, ok = f.kindOf(k); !ok {
			return fail(fmt.Errorf("volume %s: label %s: unknown kind %q", m.infer, f.kindLabel, k))
		}
		ref.Name, ref.Kind = name, kind
	}
	obj, err = l.object(ctx, vm.Namespace, ref.Kind, ref.Name)
	if err != nil {
		return fail(fmt.Errorf("%s %s: %w", ref.Kind, ref.Name, err))
	}
	if err := specInto(obj, spec); err != nil {
		return fail(err)
	}
	if errs := checkSpec(spec); len(errs) > 0 {
		return fail(fmt.Errorf("%s %s: %w", ref.Kind, ref.Name, errs.ToAggregate()))
	}
	return ref, obj, true, nil
}

// sameTarget says whether a status reference was resolved for the matcher
// as it is now (KubeVirt drops the revision when the name, the kind or the
// volume changes).
func sameTarget(old *v1.InstancetypeStatusRef, m matcher, kind string) bool {
	if m.infer != "" {
		return old.InferFromVolume == m.infer
	}
	return old.InferFromVolume == "" && old.Name == m.name && old.Kind == kind
}

// specInto copies a live object's spec into spec.
func specInto(obj runtime.Object, spec any) error {
	switch o := obj.(type) {
	case *itv1beta1.VirtualMachineInstancetype:
		*spec.(*itv1beta1.VirtualMachineInstancetypeSpec) = *o.Spec.DeepCopy()
	case *itv1beta1.VirtualMachineClusterInstancetype:
		*spec.(*itv1beta1.VirtualMachineInstancetypeSpec) = *o.Spec.DeepCopy()
	case *itv1beta1.VirtualMachinePreference:
		*spec.(*itv1beta1.VirtualMachinePreferenceSpec) = *o.Spec.DeepCopy()
	case *itv1beta1.VirtualMachineClusterPreference:
		*spec.(*itv1beta1.VirtualMachinePreferenceSpec) = *o.Spec.DeepCopy()
	default:
		return fmt.Errorf("unexpected %T", obj)
	}
	return nil
}

// checkSpec refuses what kemu cannot run, should an object have passed the
// API server without kemu's CRD rules: nothing it sets is ever dropped.
func checkSpec(spec any) field.ErrorList {
	p := field.NewPath("spec")
	errs := validation.Unsupported(spec, p)
	switch s := spec.(type) {
	case *itv1beta1.VirtualMachineInstancetypeSpec:
		errs = append(errs, validation.ValidateInstancetypeSpec(s, p)...)
	case *itv1beta1.VirtualMachinePreferenceSpec:
		errs = append(errs, validation.ValidatePreferenceSpec(s, p)...)
	}
	return errs
}

// infer reads the instance type's (or preference's) name and kind from the
// labels of the claim of the named volume.
func (l *Lookup) infer(ctx context.Context, vm *v1.VirtualMachine, f family, volume string) (name, kind string, err error) {
	if vm.Spec.Template == nil {
		return "", "", fmt.Errorf("unable to find volume %s to infer defaults: the VM has no template", volume)
	}
	for _, v := range vm.Spec.Template.Spec.Volumes {
		if v.Name != volume {
			continue
		}
		if v.PersistentVolumeClaim == nil {
			return "", "", fmt.Errorf("unable to infer defaults from volume %s as type is not supported: %w", volume, errIgnorable)
		}
		pvc, err := l.claim(ctx, vm.Namespace, v.PersistentVolumeClaim.ClaimName)
		if err != nil {
			return "", "", fmt.Errorf("volume %s: PersistentVolumeClaim %s: %w", volume, v.PersistentVolumeClaim.ClaimName, err)
		}
		name, ok := pvc.Labels[f.nameLabel]
		if !ok {
			return "", "", fmt.Errorf("unable to find required %s label on the volume %s (PersistentVolumeClaim %s): %w",
				f.nameLabel, volume, pvc.Name, errIgnorable)
		}
		return name, pvc.Labels[f.kindLabel], nil
	}
	return "", "", fmt.Errorf("unable to find volume %s to infer defaults", volume)
}

// Store keeps each live object r was resolved from in a ControllerRevision
// owned by the VM and records it in r's references. A revision of that name
// that already exists is used when it holds the same spec.
func (l *Lookup) Store(ctx context.Context, vm *v1.VirtualMachine, r *Resolved) error {
	for _, s := range []struct {
		obj    runtime.Object
		ref    *v1.InstancetypeStatusRef
		reason string
		spec   any
		empty  func() any
	}{
		{r.instancetypeObj, r.InstancetypeRef, ReasonFailedFindInstancetype, r.Instancetype,
			func() any { return &itv1beta1.VirtualMachineInstancetypeSpec{} }},
		{r.preferenceObj, r.PreferenceRef, ReasonFailedFindPreference, r.Preference,
			func() any { return &itv1beta1.VirtualMachinePreferenceSpec{} }},
	} {
		if s.obj == nil || s.ref.ControllerRevisionRef != nil {
			continue
		}
		rev, err := NewRevision(vm, s.obj)
		if err != nil {
			return &Error{Reason: s.reason, Err: err}
		}
		created, err := l.Kube.AppsV1().ControllerRevisions(vm.Namespace).Create(ctx, rev, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			created, err = l.sameRevision(ctx, rev, s.spec, s.empty())
		}
		if err != nil {
			return &Error{Reason: s.reason, Err: fmt.Errorf("storing ControllerRevision %s: %w", rev.Name, err)}
		}
		s.ref.ControllerRevisionRef = &v1.ControllerRevisionRef{Name: created.Name}
	}
	r.instancetypeObj, r.preferenceObj = nil, nil
	return nil
}

// sameRevision returns the existing revision of that name when it keeps
// the same spec.
func (l *Lookup) sameRevision(ctx context.Context, rev *appsv1.ControllerRevision, spec, into any) (*appsv1.ControllerRevision, error) {
	existing, err := l.Kube.AppsV1().ControllerRevisions(rev.Namespace).Get(ctx, rev.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var k kept
	if err := json.Unmarshal(existing.Data.Raw, &k); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(k.Spec, into); err != nil {
		return nil, err
	}
	if !equality.Semantic.DeepEqual(spec, into) {
		return nil, fmt.Errorf("an existing ControllerRevision %s holds another spec", rev.Name)
	}
	if !metav1.IsControlledBy(existing, &metav1.ObjectMeta{UID: ownerUID(rev)}) {
		return nil, fmt.Errorf("an existing ControllerRevision %s is not this VM's", rev.Name)
	}
	return existing, nil
}

func ownerUID(rev *appsv1.ControllerRevision) (uid types.UID) {
	if ref := metav1.GetControllerOfNoCopy(rev); ref != nil {
		uid = ref.UID
	}
	return uid
}
