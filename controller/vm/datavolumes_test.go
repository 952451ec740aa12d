package vm

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/cdi"
)

func TestDecideTemplate(t *testing.T) {
	vm := &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm1", UID: "vm-uid"}}
	yes, no := true, false
	ours := metav1.OwnerReference{APIVersion: v1.APIVersion, Kind: "VirtualMachine", Name: "vm1", UID: "vm-uid", Controller: &yes}
	other := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "cm", UID: "cm-uid", Controller: &yes}
	notController := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "cm", UID: "cm-uid", Controller: &no}
	dv := func(phase cdi.Phase, refs ...metav1.OwnerReference) *cdi.DataVolume {
		return &cdi.DataVolume{Namespace: "ns", Name: "disk", Phase: phase, OwnerReferences: refs}
	}
	for _, tt := range []struct {
		name     string
		dv       *cdi.DataVolume
		action   dvAction
		ready    bool
		failed   bool
		conflict string
	}{
		{name: "none: create", dv: nil, action: dvCreate},
		{name: "ours, importing", dv: dv(cdi.PhaseImportInProgress, ours), action: dvOwned},
		{name: "ours, no phase yet", dv: dv("", ours), action: dvOwned},
		{name: "ours, succeeded", dv: dv(cdi.PhaseSucceeded, ours), action: dvOwned, ready: true},
		{name: "ours, pending population", dv: dv(cdi.PhasePendingPopulation, ours), action: dvOwned, ready: true},
		{name: "ours, waits for its first consumer", dv: dv(cdi.PhaseWaitForFirstConsumer, ours), action: dvOwned, ready: true},
		{name: "ours, failed", dv: dv(cdi.PhaseFailed, ours), action: dvOwned, failed: true},
		{name: "orphan: adopt", dv: dv(cdi.PhaseSucceeded), action: dvAdopt, ready: true},
		{name: "orphan with a non-controller owner: adopt", dv: dv(cdi.PhaseImportInProgress, notController), action: dvAdopt},
		{name: "orphan, failed: adopt and report", dv: dv(cdi.PhaseFailed), action: dvAdopt, failed: true},
		{name: "another's: conflict", dv: dv(cdi.PhaseSucceeded, other), action: dvConflict, conflict: "DataVolume ns/disk is controlled by ConfigMap cm"},
		{name: "another VM's of the same name: conflict", dv: dv(cdi.PhaseSucceeded, metav1.OwnerReference{APIVersion: v1.APIVersion,
			Kind: "VirtualMachine", Name: "vm1", UID: "old-vm-uid", Controller: &yes}), action: dvConflict, conflict: "VirtualMachine vm1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := decideTemplate(vm, tt.dv)
			if d.action != tt.action || d.ready != tt.ready || d.failed != tt.failed {
				t.Errorf("got %+v, want action %d ready %v failed %v", d, tt.action, tt.ready, tt.failed)
			}
			if (tt.conflict == "") != (d.conflict == "") || !strings.Contains(d.conflict, tt.conflict) {
				t.Errorf("conflict %q, want %q", d.conflict, tt.conflict)
			}
		})
	}
}

func TestNewDataVolume(t *testing.T) {
	vm := &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm1", UID: types.UID("vm-uid")}}
	spec := map[string]any{"source": map[string]any{"blank": map[string]any{}}, "storage": map[string]any{}}
	raw, _ := json.Marshal(spec)
	for _, tt := range []struct {
		name              string
		labels, annots    map[string]string
		wantL, wantA      map[string]string
		badSpec, wantFail bool
	}{
		{name: "bare", wantL: map[string]string{launcherpod.CreatedByLabel: "vm-uid"},
			wantA: map[string]string{cdi.AllowClaimAdoptionAnnotation: "true"}},
		{name: "labels and annotations kept", labels: map[string]string{"a": "b"}, annots: map[string]string{"c": "d"},
			wantL: map[string]string{"a": "b", launcherpod.CreatedByLabel: "vm-uid"},
			wantA: map[string]string{"c": "d", cdi.AllowClaimAdoptionAnnotation: "true"}},
		{name: "a spec that is no object", badSpec: true, wantFail: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tmpl := &v1.DataVolumeTemplateSpec{ObjectMeta: metav1.ObjectMeta{Name: "disk", Labels: tt.labels, Annotations: tt.annots},
				Spec: runtime.RawExtension{Raw: raw}}
			if tt.badSpec {
				tmpl.Spec.Raw = []byte(`"text"`)
			}
			u, err := newDataVolume(vm, tmpl)
			if (err != nil) != tt.wantFail {
				t.Fatalf("err %v", err)
			}
			if tt.wantFail {
				return
			}
			if u.GroupVersionKind() != cdi.GVK || u.GetName() != "disk" || u.GetNamespace() != "ns" {
				t.Errorf("object %v %s/%s", u.GroupVersionKind(), u.GetNamespace(), u.GetName())
			}
			if !reflect.DeepEqual(u.GetLabels(), tt.wantL) || !reflect.DeepEqual(u.GetAnnotations(), tt.wantA) {
				t.Errorf("labels %v annotations %v", u.GetLabels(), u.GetAnnotations())
			}
			if tt.labels != nil && len(tt.labels) != 1 {
				t.Errorf("the template's labels changed: %v", tt.labels)
			}
			if ref := metav1.GetControllerOfNoCopy(u); ref == nil || ref.UID != vm.UID || ref.Kind != "VirtualMachine" ||
				ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
				t.Errorf("controller %+v", ref)
			}
			if got, _, _ := unstructured.NestedMap(u.Object, "spec"); !reflect.DeepEqual(got, spec) {
				t.Errorf("spec %v", got)
			}
		})
	}
}
