package instancetypes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"

	itv1beta1 "github.com/kemu-dev/kemu/api/instancetype/v1beta1"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// RevisionName is KubeVirt's name of the revision of an object for a VM:
// <vm>-<object>-<version>-<object uid>-<generation>, cut and hashed when
// longer than a name may be.
func RevisionName(vmName string, obj metav1.Object) string {
	name := fmt.Sprintf("%s-%s-%s-%s-%d", vmName, obj.GetName(), itv1beta1.SchemeGroupVersion.Version, obj.GetUID(), obj.GetGeneration())
	if len(name) <= validation.DNS1123SubdomainMaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:validation.DNS1123SubdomainMaxLength-17] + "-" + hex.EncodeToString(sum[:8])
}

// NewRevision is the ControllerRevision keeping obj (an instance type or
// preference with its TypeMeta set) for vm: the object's kind, name, uid,
// generation and spec, labelled with them, owned (controlled) by the VM.
func NewRevision(vm *v1.VirtualMachine, obj runtime.Object) (*appsv1.ControllerRevision, error) {
	m, err := metaOf(obj)
	if err != nil {
		return nil, err
	}
	kept := obj.DeepCopyObject()
	km, _ := metaOf(kept)
	km.SetLabels(nil)
	km.SetAnnotations(nil)
	km.SetFinalizers(nil)
	km.SetOwnerReferences(nil)
	km.SetManagedFields(nil)
	km.SetResourceVersion("")
	raw, err := json.Marshal(kept)
	if err != nil {
		return nil, err
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name:            RevisionName(vm.Name, m),
			Namespace:       vm.Namespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, v1.SchemeGroupVersion.WithKind("VirtualMachine"))},
			Labels: map[string]string{
				itv1beta1.RevisionObjectNameLabel:       m.GetName(),
				itv1beta1.RevisionObjectKindLabel:       gvk.Kind,
				itv1beta1.RevisionObjectUIDLabel:        string(m.GetUID()),
				itv1beta1.RevisionObjectGenerationLabel: strconv.FormatInt(m.GetGeneration(), 10),
				itv1beta1.RevisionObjectVersionLabel:    gvk.Version,
			},
		},
		Data: runtime.RawExtension{Raw: raw},
	}, nil
}

func metaOf(obj runtime.Object) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no metadata", obj)
	}
	return m, nil
}

// kept is what a revision's data holds.
type kept struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              json.RawMessage `json:"spec"`
}

// revisionSpec reads the spec a revision keeps, checking that it holds one
// of the wanted kinds of instancetype.kemu.dev/v1beta1.
func revisionSpec(rev *appsv1.ControllerRevision, into any, kinds ...string) (*kept, error) {
	var k kept
	if err := json.Unmarshal(rev.Data.Raw, &k); err != nil {
		return nil, fmt.Errorf("ControllerRevision %s: %w", rev.Name, err)
	}
	ok := k.APIVersion == itv1beta1.APIVersion
	found := false
	for _, kind := range kinds {
		found = found || k.Kind == kind
	}
	if !ok || !found {
		return nil, fmt.Errorf("ControllerRevision %s holds %s %s, not a %s of %s", rev.Name, k.APIVersion, k.Kind, kinds, itv1beta1.APIVersion)
	}
	if err := json.Unmarshal(k.Spec, into); err != nil {
		return nil, fmt.Errorf("ControllerRevision %s: %w", rev.Name, err)
	}
	return &k, nil
}
