//go:build cluster

package vm

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	kubeinformers "k8s.io/client-go/informers"

	kemuinformers "github.com/kemu-dev/kemu/api/client/informers/externalversions"
	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/cdi"
	"github.com/kemu-dev/kemu/test/cluster"
)

// The DataVolume tests install a minimal stand-in for CDI's DataVolume CRD
// (test/cluster.InstallDataVolumeCRD): CDI's real CRD and its controller
// are not available offline, so each test writes the DataVolume's status
// itself, as CDI's controller would.

const dvTimeout = 30 * time.Second

func withDataVolumeCRD(t *testing.T) {
	t.Helper()
	if err := shared.InstallDataVolumeCRD(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := shared.RemoveDataVolumeCRD(); err != nil {
			t.Error(err)
		}
	})
}

// newCDIController is newController (running) with a DataVolume Watcher,
// as kemu-controller runs it, asking discovery every second.
func newCDIController(t *testing.T) *recorder {
	t.Helper()
	ki := kubeinformers.NewSharedInformerFactory(kube, 0)
	vi := kemuinformers.NewSharedInformerFactory(kemu, 0)
	w := cdi.NewWatcher(kube.Discovery(), dynamic.NewForConfigOrDie(shared.RESTConfig()), "", 0, time.Second)
	opts := testOptions
	opts.DataVolumes = w
	rec := &recorder{}
	c, err := New(kube, kemu, ki, vi, rec, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go w.Run(ctx)
	go func() { done <- c.Run(ctx, 2) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		ki.Shutdown()
		vi.Shutdown()
	})
	return rec
}

var dvSpec = map[string]any{
	"source":  map[string]any{"http": map[string]any{"url": "http://images.example/disk.img"}},
	"storage": map[string]any{"resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}},
}

// dvVM is newVM with its root disk on a dataVolumeTemplate named
// <name>-disk.
func dvVM(t *testing.T, ns, name string) *v1.VirtualMachine {
	t.Helper()
	vm := newVM(ns, name, v1.RunStrategyAlways)
	raw, err := json.Marshal(dvSpec)
	if err != nil {
		t.Fatal(err)
	}
	vm.Spec.DataVolumeTemplates = []v1.DataVolumeTemplateSpec{{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-disk", Labels: map[string]string{"tier": "gold"},
			Annotations: map[string]string{"note": "from the template"}},
		Spec: runtime.RawExtension{Raw: raw},
	}}
	vm.Spec.Template.Spec.Volumes = []v1.Volume{{Name: "root", DataVolume: &v1.DataVolumeSource{Name: name + "-disk"}}}
	return vm
}

func getDV(t *testing.T, ns, name string) *unstructured.Unstructured {
	t.Helper()
	dv, err := shared.DataVolumes().Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return dv
}

func setDVStatus(t *testing.T, ns, name string, st cluster.DataVolumeStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dvTimeout)
	defer cancel()
	if _, err := shared.SetDataVolumeStatus(ctx, ns, name, st); err != nil {
		t.Fatal(err)
	}
}

func waitFailure(t *testing.T, ns, name, reason string) *v1.VirtualMachineCondition {
	t.Helper()
	var c *v1.VirtualMachineCondition
	eventually(t, dvTimeout, "Failure "+reason, func() bool {
		c = condition(getVM(t, ns, name), v1.VirtualMachineFailure)
		return c != nil && c.Status == corev1.ConditionTrue && c.Reason == reason
	})
	return c
}

// TestDataVolumeTemplates: the VM creates its template's DataVolume (its
// name, labels, annotations and spec, owned by the VM) and shows
// Provisioning while it imports, DataVolumeError when its importer fails,
// and starts its VMI once it Succeeded.
func TestDataVolumeTemplates(t *testing.T) {
	withDataVolumeCRD(t)
	ns := namespace(t)
	rec := newCDIController(t)
	vm := createVM(t, dvVM(t, ns, "vm1"))

	var dv *unstructured.Unstructured
	eventually(t, dvTimeout, "the DataVolume", func() bool { dv = getDV(t, ns, "vm1-disk"); return dv != nil })
	if ref := metav1.GetControllerOfNoCopy(dv); ref == nil || ref.UID != vm.UID || ref.Kind != "VirtualMachine" {
		t.Errorf("DataVolume controller %+v, want the VM %s", ref, vm.UID)
	}
	if l := dv.GetLabels(); l["tier"] != "gold" || l[launcherpod.CreatedByLabel] != string(vm.UID) {
		t.Errorf("DataVolume labels %v", l)
	}
	if a := dv.GetAnnotations(); a["note"] != "from the template" || a[cdi.AllowClaimAdoptionAnnotation] != "true" {
		t.Errorf("DataVolume annotations %v", a)
	}
	if spec, _, _ := unstructured.NestedMap(dv.Object, "spec"); !reflect.DeepEqual(spec, dvSpec) {
		t.Errorf("DataVolume spec %v, want %v", spec, dvSpec)
	}
	waitStatus(t, ns, "vm1", v1.VirtualMachineStatusProvisioning)

	setDVStatus(t, ns, "vm1-disk", cluster.DataVolumeStatus{Phase: string(cdi.PhaseImportInProgress), Progress: "10.00%"})
	setDVStatus(t, ns, "vm1-disk", cluster.DataVolumeStatus{Phase: string(cdi.PhaseImportInProgress), Progress: "12.00%",
		Conditions: []cluster.DataVolumeCondition{{Type: cdi.ConditionRunning, Status: "False", Reason: "Error",
			Message: "Unable to connect to http data source"}}})
	waitStatus(t, ns, "vm1", v1.VirtualMachineStatusDataVolumeError)
	setDVStatus(t, ns, "vm1-disk", cluster.DataVolumeStatus{Phase: string(cdi.PhaseFailed),
		Conditions: []cluster.DataVolumeCondition{{Type: cdi.ConditionRunning, Status: "False", Reason: "Error",
			Message: "Unable to connect to http data source"}}})
	eventually(t, dvTimeout, "a FailedDataVolumeImport event", func() bool { return rec.count(ReasonFailedDataVolumeImport) > 0 })
	if vmi := getVMI(t, ns, "vm1"); vmi != nil {
		t.Fatalf("a VMI while the DataVolume failed: %+v", vmi.Status)
	}

	setDVStatus(t, ns, "vm1-disk", cluster.DataVolumeStatus{Phase: string(cdi.PhaseSucceeded), Progress: "100.0%"})
	vmi := waitVMI(t, ns, "vm1")
	if vmi.Spec.Volumes[0].DataVolume == nil || vmi.Spec.Volumes[0].DataVolume.Name != "vm1-disk" {
		t.Errorf("VMI volumes %+v", vmi.Spec.Volumes)
	}
	waitStatus(t, ns, "vm1", v1.VirtualMachineStatusStarting)
	if n := rec.count(ReasonDataVolumeCreated); n != 1 {
		t.Errorf("%d DataVolume creations: %q", n, rec.events)
	}
}

// TestDataVolumeAdoptionAndConflict: an orphan DataVolume of a template's
// name is adopted; one another object controls is a DataVolumeConflict and
// the VM creates no VMI.
func TestDataVolumeAdoptionAndConflict(t *testing.T) {
	withDataVolumeCRD(t)
	ns := namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), dvTimeout)
	defer cancel()
	if _, err := shared.CreateDataVolume(ctx, ns, "orphan-disk", dvSpec,
		cluster.DataVolumeStatus{Phase: string(cdi.PhaseSucceeded)}); err != nil {
		t.Fatal(err)
	}
	other, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owned, err := shared.CreateDataVolume(ctx, ns, "taken-disk", dvSpec, cluster.DataVolumeStatus{Phase: string(cdi.PhaseSucceeded)})
	if err != nil {
		t.Fatal(err)
	}
	owned.SetOwnerReferences([]metav1.OwnerReference{*metav1.NewControllerRef(other, corev1.SchemeGroupVersion.WithKind("ConfigMap"))})
	if _, err := shared.DataVolumes().Namespace(ns).Update(ctx, owned, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	rec := newCDIController(t)
	orphanVM := createVM(t, dvVM(t, ns, "orphan"))
	createVM(t, dvVM(t, ns, "taken"))

	eventually(t, dvTimeout, "the orphan adopted", func() bool {
		ref := metav1.GetControllerOfNoCopy(getDV(t, ns, "orphan-disk"))
		return ref != nil && ref.UID == orphanVM.UID
	})
	waitVMI(t, ns, "orphan")
	// (The controller watches every namespace: other tests' VMs are synced too.)
	rec.mu.Lock()
	for _, e := range rec.events {
		if strings.HasPrefix(e, ReasonDataVolumeCreated+":") && (strings.Contains(e, "orphan-disk") || strings.Contains(e, "taken-disk")) {
			t.Errorf("a DataVolume created for a name that exists: %s", e)
		}
	}
	rec.mu.Unlock()

	c := waitFailure(t, ns, "taken", ReasonDataVolumeConflict)
	if !strings.Contains(c.Message, "ConfigMap other") {
		t.Errorf("conflict message %q", c.Message)
	}
	if ref := metav1.GetControllerOfNoCopy(getDV(t, ns, "taken-disk")); ref == nil || ref.UID != other.UID {
		t.Errorf("the other's DataVolume changed controller: %+v", ref)
	}
	consistently(t, 2*time.Second, "no VMI of a conflicting VM", func() bool { return getVMI(t, ns, "taken") == nil })
}

// TestDataVolumeTemplatesWithoutCDI: without CDI's API a VM with
// dataVolumeTemplates reports CDINotInstalled and creates no VMI.
func TestDataVolumeTemplatesWithoutCDI(t *testing.T) {
	if err := shared.RemoveDataVolumeCRD(); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t)
	rec := newCDIController(t)
	createVM(t, dvVM(t, ns, "nocdi"))
	c := waitFailure(t, ns, "nocdi", ReasonCDINotInstalled)
	if !strings.Contains(c.Message, "spec.dataVolumeTemplates") {
		t.Errorf("message %q names no field", c.Message)
	}
	if rec.count(ReasonCDINotInstalled) == 0 {
		t.Error("no CDINotInstalled event")
	}
	consistently(t, 2*time.Second, "no VMI without CDI", func() bool { return getVMI(t, ns, "nocdi") == nil })
}
