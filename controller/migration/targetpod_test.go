package migration

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/controller/template"
)

func TestRenderTarget(t *testing.T) {
	mem := resource.MustParse("128Mi")
	vmi := &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns", UID: "vmi-uid"},
		Spec: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: &mem},
				Devices: v1.Devices{Disks: []v1.Disk{{Name: "root", Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}}},
			Volumes: []v1.Volume{{Name: "root", PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "disk"}}},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{
					{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}},
					{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}},
				}}}},
		},
	}
	tmpl := template.NewService(template.Options{LauncherImage: "l:1"})
	v1.SetVirtualMachineInstanceDefaults(vmi)
	// The source as rendered with KVM and a block claim.
	source, err := tmpl.Render(template.Input{VMI: vmi, KVM: true, PVCBlock: map[string]bool{"disk": true}})
	if err != nil {
		t.Fatal(err)
	}
	source.Spec.NodeName = "node-a"
	m := mig("m", "mig-uid", v1.MigrationPending, t0)
	m.Namespace = "ns"

	got, err := renderTarget(tmpl, m, vmi, source, false)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name == source.Name || got.Name != launcherpod.MigrationTargetPodName(vmi, m.UID) || len(got.Name) > launcherpod.MaxPodNameLength {
		t.Errorf("name %q (source %q)", got.Name, source.Name)
	}
	if got.Labels[launcherpod.MigrationUIDLabel] != "mig-uid" || got.Labels[launcherpod.CreatedByLabel] != "vmi-uid" {
		t.Errorf("labels %v", got.Labels)
	}
	if ref := metav1.GetControllerOf(got); ref == nil || ref.UID != "vmi-uid" {
		t.Errorf("owner %v", got.OwnerReferences)
	}
	// The same containers, volumes and resources as the source: KVM and the
	// block device came from the source Pod.
	if !reflect.DeepEqual(got.Spec.Containers, source.Spec.Containers) || !reflect.DeepEqual(got.Spec.Volumes, source.Spec.Volumes) {
		t.Errorf("target containers differ from the source's:\n%+v\n%+v", got.Spec.Containers, source.Spec.Containers)
	}
	terms := got.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 2 {
		t.Fatalf("terms %+v", terms)
	}
	for _, term := range terms {
		if len(term.MatchExpressions) != 1 || len(term.MatchFields) != 1 || term.MatchFields[0].Key != "metadata.name" ||
			term.MatchFields[0].Operator != corev1.NodeSelectorOpNotIn || term.MatchFields[0].Values[0] != "node-a" {
			t.Errorf("term %+v: want the VMI's expression and NotIn node-a", term)
		}
	}
	if vmi.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields != nil {
		t.Error("the VMI's affinity was changed")
	}

	same, err := renderTarget(tmpl, m, vmi, source, true)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(same.Spec.Affinity, vmi.Spec.Affinity) {
		t.Errorf("allowSameNode: affinity %+v", same.Spec.Affinity)
	}

	vmi.Spec.Affinity = nil
	plain, err := renderTarget(tmpl, m, vmi, source, false)
	if err != nil {
		t.Fatal(err)
	}
	if terms := plain.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms; len(terms) != 1 ||
		len(terms[0].MatchFields) != 1 || terms[0].MatchFields[0].Values[0] != "node-a" {
		t.Errorf("no VMI affinity: terms %+v", terms)
	}
}
