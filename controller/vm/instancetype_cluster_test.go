//go:build cluster

package vm

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	itv1beta1 "github.com/kemu-dev/kemu/api/instancetype/v1beta1"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// instancetypeVM is a VM of strategy Always that leaves CPU and memory to
// its instance type.
func instancetypeVM(ns, name string, it *v1.InstancetypeMatcher, pref *v1.PreferenceMatcher) *v1.VirtualMachine {
	vm := newVM(ns, name, v1.RunStrategyAlways)
	vm.Spec.Template.Spec.Domain.Memory = nil
	vm.Spec.Instancetype, vm.Spec.Preference = it, pref
	return vm
}

func itSpec(cpus uint32, mem string) itv1beta1.VirtualMachineInstancetypeSpec {
	return itv1beta1.VirtualMachineInstancetypeSpec{
		CPU:    itv1beta1.CPUInstancetype{Guest: cpus},
		Memory: itv1beta1.MemoryInstancetype{Guest: mustQuantity(mem)},
	}
}

func diskBus(vmi *v1.VirtualMachineInstance) v1.DiskBus {
	if d := vmi.Spec.Domain.Devices.Disks; len(d) == 1 && d[0].Disk != nil {
		return d[0].Disk.Bus
	}
	return ""
}

// restart deletes the VM's VMI and waits for the next one.
func restart(t *testing.T, vmi *v1.VirtualMachineInstance) *v1.VirtualMachineInstance {
	t.Helper()
	if err := kemu.KemuV1alpha1().VirtualMachineInstances(vmi.Namespace).Delete(context.Background(), vmi.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	return waitVMI(t, vmi.Namespace, vmi.Name, vmi.UID)
}

// A VM with a namespaced instance type and a cluster-wide preference
// starts a VMI with the expanded CPU, memory and disk bus; editing the
// instance type changes nothing until the VM's revision is cleared.
func TestInstancetypeExpansionAndRevision(t *testing.T) {
	ns := namespace(t)
	newController(t, true)
	ctx := context.Background()
	its := kemu.InstancetypeV1beta1()
	if _, err := its.VirtualMachineInstancetypes(ns).Create(ctx, &itv1beta1.VirtualMachineInstancetype{
		ObjectMeta: metav1.ObjectMeta{Name: "small"}, Spec: itSpec(2, "256Mi")}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cores := itv1beta1.Cores
	prefName := ns + "-pref"
	if _, err := its.VirtualMachineClusterPreferences().Create(ctx, &itv1beta1.VirtualMachineClusterPreference{
		ObjectMeta: metav1.ObjectMeta{Name: prefName},
		Spec: itv1beta1.VirtualMachinePreferenceSpec{
			CPU:     &itv1beta1.CPUPreferences{PreferredCPUTopology: &cores},
			Devices: &itv1beta1.DevicePreferences{PreferredDiskBus: v1.DiskBusSATA},
		}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = its.VirtualMachineClusterPreferences().Delete(ctx, prefName, metav1.DeleteOptions{}) })

	createVM(t, instancetypeVM(ns, "vm", &v1.InstancetypeMatcher{Name: "small", Kind: itv1beta1.KindInstancetype},
		&v1.PreferenceMatcher{Name: prefName}))
	vmi := waitVMI(t, ns, "vm")
	c := vmi.Spec.Domain.CPU
	if c == nil || c.Sockets != 1 || c.Cores != 2 || c.Threads != 1 || vmi.Spec.Domain.Memory.Guest.String() != "256Mi" || diskBus(vmi) != v1.DiskBusSATA {
		t.Fatalf("VMI not expanded: cpu %+v memory %+v disks %+v", c, vmi.Spec.Domain.Memory, vmi.Spec.Domain.Devices.Disks)
	}
	vm := getVM(t, ns, "vm")
	ref := vm.Status.InstancetypeRef
	if ref == nil || ref.ControllerRevisionRef == nil || ref.Name != "small" || ref.Kind != itv1beta1.KindInstancetype ||
		vm.Status.PreferenceRef == nil || vm.Status.PreferenceRef.ControllerRevisionRef == nil {
		t.Fatalf("status refs %+v %+v", ref, vm.Status.PreferenceRef)
	}
	rev, err := kube.AppsV1().ControllerRevisions(ns).Get(ctx, ref.ControllerRevisionRef.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(rev, vm) || rev.Labels[itv1beta1.RevisionObjectNameLabel] != "small" {
		t.Errorf("revision %s: owners %v labels %v", rev.Name, rev.OwnerReferences, rev.Labels)
	}

	// Edit the instance type: the next VMI keeps the revision's 2 vCPUs.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		it, err := its.VirtualMachineInstancetypes(ns).Get(ctx, "small", metav1.GetOptions{})
		if err != nil {
			return err
		}
		it.Spec.CPU.Guest = 4
		_, err = its.VirtualMachineInstancetypes(ns).Update(ctx, it, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	vmi = restart(t, vmi)
	if vmi.Spec.Domain.CPU.Cores != 2 {
		t.Fatalf("the edited instance type reached the VM's next VMI: cpu %+v", vmi.Spec.Domain.CPU)
	}

	// Clear the revision: the VM takes the instance type as it is now.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		vm := getVM(t, ns, "vm")
		vm.Status.InstancetypeRef = nil
		_, err := kemu.KemuV1alpha1().VirtualMachines(ns).UpdateStatus(ctx, vm, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "a new revision", func() bool {
		r := getVM(t, ns, "vm").Status.InstancetypeRef
		return r != nil && r.ControllerRevisionRef != nil && r.ControllerRevisionRef.Name != ref.ControllerRevisionRef.Name
	})
	if vmi = restart(t, vmi); vmi.Spec.Domain.CPU.Cores != 4 {
		t.Fatalf("cleared revision, still cpu %+v", vmi.Spec.Domain.CPU)
	}
}

// A VM that sets what its instance type sets starts nothing; its Failure
// condition names the field, as KubeVirt reports it.
func TestInstancetypeConflict(t *testing.T) {
	ns := namespace(t)
	_, rec := newController(t, true)
	ctx := context.Background()
	if _, err := kemu.InstancetypeV1beta1().VirtualMachineInstancetypes(ns).Create(ctx, &itv1beta1.VirtualMachineInstancetype{
		ObjectMeta: metav1.ObjectMeta{Name: "small"}, Spec: itSpec(2, "256Mi")}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vm := instancetypeVM(ns, "vm", &v1.InstancetypeMatcher{Name: "small", Kind: itv1beta1.KindInstancetype}, nil)
	vm.Spec.Template.Spec.Domain.CPU = &v1.CPU{Sockets: 2}
	vm.Spec.Template.Spec.Domain.Memory = &v1.Memory{Guest: ptr(mustQuantity("128Mi"))}
	createVM(t, vm)
	eventually(t, 30*time.Second, "the Failure condition", func() bool {
		c := condition(getVM(t, ns, "vm"), v1.VirtualMachineFailure)
		return c != nil && c.Reason == ReasonFailedCreate &&
			strings.Contains(c.Message, "spec.template.spec.domain.cpu.sockets") &&
			strings.Contains(c.Message, "spec.template.spec.domain.memory.guest")
	})
	if getVMI(t, ns, "vm") != nil {
		t.Fatal("a VMI was created")
	}
	if rec.count(ReasonFailedCreate) == 0 {
		t.Error("no FailedCreate event")
	}
	if r := getVM(t, ns, "vm").Status.InstancetypeRef; r != nil {
		t.Errorf("a conflicting instance type was kept: %+v", r)
	}
}

// The default kind is the cluster-wide instance type; its vCPUs become
// sockets without a preference.
func TestClusterInstancetype(t *testing.T) {
	ns := namespace(t)
	newController(t, true)
	ctx := context.Background()
	name := ns + ".medium"
	it := itSpec(3, "512Mi")
	it.Memory.OvercommitPercent = 50
	if _, err := kemu.InstancetypeV1beta1().VirtualMachineClusterInstancetypes().Create(ctx, &itv1beta1.VirtualMachineClusterInstancetype{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: it}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kemu.InstancetypeV1beta1().VirtualMachineClusterInstancetypes().Delete(ctx, name, metav1.DeleteOptions{})
	})
	createVM(t, instancetypeVM(ns, "vm", &v1.InstancetypeMatcher{Name: name}, nil))
	vmi := waitVMI(t, ns, "vm")
	if c := vmi.Spec.Domain.CPU; c.Sockets != 3 || c.Cores != 1 || vmi.Spec.Domain.Memory.Guest.String() != "512Mi" ||
		vmi.Spec.Domain.Resources.Requests.Memory().String() != "256Mi" {
		t.Fatalf("cpu %+v memory %v requests %v", c, vmi.Spec.Domain.Memory.Guest, vmi.Spec.Domain.Resources.Requests)
	}
	if r := getVM(t, ns, "vm").Status.InstancetypeRef; r == nil || r.Kind != itv1beta1.KindClusterInstancetype {
		t.Errorf("status ref %+v", r)
	}
}

// The instance type and preference are inferred from the labels of a
// persistentVolumeClaim volume's claim; without the labels, the Ignore
// policy starts the VM from its template.
func TestInstancetypeInferredFromPVC(t *testing.T) {
	ns := namespace(t)
	newController(t, true)
	ctx := context.Background()
	its := kemu.InstancetypeV1beta1()
	if _, err := its.VirtualMachineInstancetypes(ns).Create(ctx, &itv1beta1.VirtualMachineInstancetype{
		ObjectMeta: metav1.ObjectMeta{Name: "inferred"}, Spec: itSpec(2, "384Mi")}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := its.VirtualMachinePreferences(ns).Create(ctx, &itv1beta1.VirtualMachinePreference{
		ObjectMeta: metav1.ObjectMeta{Name: "os"},
		Spec:       itv1beta1.VirtualMachinePreferenceSpec{Devices: &itv1beta1.DevicePreferences{PreferredDiskBus: v1.DiskBusSCSI}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claim := func(name string, labels map[string]string) {
		if _, err := kube.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: mustQuantity("1Gi")}},
			}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	claim("labelled", map[string]string{
		itv1beta1.DefaultInstancetypeLabel: "inferred", itv1beta1.DefaultInstancetypeKindLabel: itv1beta1.KindInstancetype,
		itv1beta1.DefaultPreferenceLabel: "os", itv1beta1.DefaultPreferenceKindLabel: itv1beta1.KindPreference,
	})
	claim("bare", nil)
	pvcVM := func(name, claimName string, policy v1.InferFromVolumeFailurePolicy) *v1.VirtualMachine {
		vm := instancetypeVM(ns, name, &v1.InstancetypeMatcher{InferFromVolume: "root", InferFromVolumeFailurePolicy: &policy},
			&v1.PreferenceMatcher{InferFromVolume: "root", InferFromVolumeFailurePolicy: &policy})
		// The fallback memory of the Ignore policy.
		vm.Spec.Template.Spec.Domain.Memory = &v1.Memory{Guest: ptr(mustQuantity("128Mi"))}
		vm.Spec.Template.Spec.Volumes = []v1.Volume{{Name: "root",
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claimName}}}
		return vm
	}

	createVM(t, pvcVM("labelled", "labelled", v1.IgnoreInferFromVolumeFailure))
	vmi := waitVMI(t, ns, "labelled")
	if c := vmi.Spec.Domain.CPU; c.Sockets != 2 || vmi.Spec.Domain.Memory.Guest.String() != "384Mi" || diskBus(vmi) != v1.DiskBusSCSI {
		t.Fatalf("not expanded from the claim's labels: cpu %+v memory %v disks %+v", c, vmi.Spec.Domain.Memory.Guest, vmi.Spec.Domain.Devices.Disks)
	}
	vm := getVM(t, ns, "labelled")
	if r := vm.Status.InstancetypeRef; r == nil || r.Name != "inferred" || r.Kind != itv1beta1.KindInstancetype || r.InferFromVolume != "root" {
		t.Errorf("instancetypeRef %+v", r)
	}
	if r := vm.Status.PreferenceRef; r == nil || r.Name != "os" || r.Kind != itv1beta1.KindPreference {
		t.Errorf("preferenceRef %+v", r)
	}

	createVM(t, pvcVM("ignored", "bare", v1.IgnoreInferFromVolumeFailure))
	vmi = waitVMI(t, ns, "ignored")
	if vmi.Spec.Domain.Memory.Guest.String() != "128Mi" || vmi.Spec.Domain.CPU != nil {
		t.Errorf("Ignore: want the template's VMI, got cpu %+v memory %v", vmi.Spec.Domain.CPU, vmi.Spec.Domain.Memory.Guest)
	}

	createVM(t, pvcVM("rejected", "bare", v1.RejectInferFromVolumeFailure))
	eventually(t, 30*time.Second, "the Failure condition", func() bool {
		c := condition(getVM(t, ns, "rejected"), v1.VirtualMachineFailure)
		return c != nil && c.Reason == "FailedFindInstancetype" && strings.Contains(c.Message, itv1beta1.DefaultInstancetypeLabel)
	})
	if getVMI(t, ns, "rejected") != nil {
		t.Error("Reject: a VMI was created")
	}
}
