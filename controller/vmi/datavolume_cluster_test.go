//go:build cluster

package vmi

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/controller/template"
	"github.com/kemu-dev/kemu/kube/cdi"
	"github.com/kemu-dev/kemu/kube/vmistatus"
	"github.com/kemu-dev/kemu/test/cluster"
)

// The DataVolume tests install a minimal stand-in for CDI's DataVolume CRD
// (test/cluster.InstallDataVolumeCRD): CDI's real CRD and its controller
// are not available offline, so each test writes the DataVolume's status
// (and binds the claim) itself, as CDI's controller would.

// cdiRecheck: how often the tests' controllers ask discovery about CDI.
const cdiRecheck = time.Second

// prompt bounds how long a DataVolume or claim event may take to move a
// waiting VMI on: far below dataVolumeRetry and pvcRetry, so only the
// events can have done it.
const prompt = 5 * time.Second

func withCRD(t *testing.T) {
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

func withoutCRD(t *testing.T) {
	t.Helper()
	if err := shared.RemoveDataVolumeCRD(); err != nil {
		t.Fatal(err)
	}
}

func startDVController(t *testing.T, ns string) *running {
	t.Helper()
	return startControllerCDI(t, ns, nil, 50, template.Options{LauncherImage: launcherImage}, cdiRecheck)
}

// dvVMI is newVMI with its root disk on dataVolume claim.
func dvVMI(name, claim string) *v1.VirtualMachineInstance {
	vmi := newVMI(name)
	vmi.Spec.Volumes = []v1.Volume{{Name: "root", DataVolume: &v1.DataVolumeSource{Name: claim}}}
	return vmi
}

// staticClaim creates a PersistentVolume and a claim pre-bound to it
// (spec.volumeName), Pending until bindClaim: the vmi package runs no
// kube-controller-manager, so the test plays the PV binder. owner, when
// set, controls the claim, as CDI's DataVolume controls the PVC it
// populates.
func staticClaim(t *testing.T, ns, name string, owner *unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	pvName := ns + "-" + name
	size := resource.MustParse("1Gi")
	fs := corev1.PersistentVolumeFilesystem
	_, err := admin.kube.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/tmp/" + pvName}},
			ClaimRef:               &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: name},
			VolumeMode:             &fs,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	empty := ""
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
			VolumeName:       pvName,
			StorageClassName: &empty,
			VolumeMode:       &fs,
		},
	}
	if owner != nil {
		yes := true
		pvc.OwnerReferences = []metav1.OwnerReference{{APIVersion: owner.GetAPIVersion(), Kind: owner.GetKind(),
			Name: owner.GetName(), UID: owner.GetUID(), Controller: &yes, BlockOwnerDeletion: &yes}}
	}
	if _, err := admin.kube.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// bindClaim plays the PV binder: claim and volume Bound.
func bindClaim(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	pvc, err := admin.kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := admin.kube.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv.Spec.ClaimRef.UID = pvc.UID
	if pv, err = admin.kube.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pv.Status.Phase = corev1.VolumeBound
	if _, err = admin.kube.CoreV1().PersistentVolumes().UpdateStatus(ctx, pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc.Status.Phase = corev1.ClaimBound
	pvc.Status.AccessModes = pvc.Spec.AccessModes
	pvc.Status.Capacity = pv.Spec.Capacity
	if _, err = admin.kube.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func createDV(t *testing.T, ns, name string, status cluster.DataVolumeStatus) *unstructured.Unstructured {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	defer cancel()
	dv, err := shared.CreateDataVolume(ctx, ns, name, map[string]any{
		"source":  map[string]any{"http": map[string]any{"url": "http://images.example/disk.img"}},
		"storage": map[string]any{"resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}},
	}, status)
	if err != nil {
		t.Fatal(err)
	}
	return dv
}

func setDVStatus(t *testing.T, ns, name string, status cluster.DataVolumeStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	defer cancel()
	if _, err := shared.SetDataVolumeStatus(ctx, ns, name, status); err != nil {
		t.Fatal(err)
	}
}

func dvCondition(status corev1.ConditionStatus, reason, msgPart string) func(*v1.VirtualMachineInstance) bool {
	return func(v *v1.VirtualMachineInstance) bool {
		c := condition(v, v1.VirtualMachineInstanceDataVolumesReady)
		return c != nil && c.Status == status && c.Reason == reason && strings.Contains(c.Message, msgPart)
	}
}

// noLauncherPodFor checks, for a while, that the waiting VMI gets no Pod.
func noLauncherPodFor(t *testing.T, ns string, d time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, d, true,
		func(context.Context) (bool, error) { return len(launcherPods(t, ns)) > 0, nil })
	if err == nil {
		t.Fatalf("a launcher Pod was created while the VMI waits: %v", launcherPods(t, ns))
	}
}

// waitPodWithin waits for the VMI's launcher Pod, failing after d.
func waitPodWithin(t *testing.T, ns, name string, d time.Duration) *v1.VirtualMachineInstance {
	t.Helper()
	start := time.Now()
	var last *v1.VirtualMachineInstance
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, d, true,
		func(ctx context.Context) (bool, error) {
			vmi, err := admin.kemu.KemuV1alpha1().VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			last = vmi
			return vmi.Status.Phase == v1.Scheduling && vmi.Status.LauncherPod != "", nil
		})
	if err != nil {
		t.Fatalf("VMI %s/%s: no launcher Pod within %s: %+v", ns, name, d, statusOf(last))
	}
	t.Logf("launcher Pod %s after %s", last.Status.LauncherPod, time.Since(start).Round(time.Millisecond))
	return last
}

// TestDataVolumeImport: with CDI's API, a VMI whose DataVolume imports
// waits (DataVolumesReady False, no launcher Pod); the DataVolume
// Succeeded and its claim Bound, the Pod is created at once (the
// DataVolume Watcher's event, not a re-check).
func TestDataVolumeImport(t *testing.T) {
	withCRD(t)
	ns := newNamespace(t, "dv-import")
	dv := createDV(t, ns, "disk", cluster.DataVolumeStatus{Phase: string(cdi.PhaseImportInProgress), Progress: "45.00%"})
	staticClaim(t, ns, "disk", dv)
	startDVController(t, ns)
	createVMI(t, ns, dvVMI("vm1", "disk"))

	vmi := waitVMI(t, ns, "vm1", "DataVolumesReady False", dvCondition(corev1.ConditionFalse,
		v1.VirtualMachineInstanceReasonNotAllDVsReady, "DataVolume disk (volume root) is ImportInProgress (45.00%)"))
	if vmi.Status.Phase != v1.Pending {
		t.Errorf("phase %s while the DataVolume imports", vmi.Status.Phase)
	}
	noLauncherPodFor(t, ns, 2*time.Second)

	bindClaim(t, ns, "disk")
	setDVStatus(t, ns, "disk", cluster.DataVolumeStatus{Phase: string(cdi.PhaseSucceeded), Progress: "100.0%",
		Conditions: []cluster.DataVolumeCondition{{Type: cdi.ConditionReady, Status: "True"}}})
	vmi = waitPodWithin(t, ns, "vm1", prompt)
	if c := condition(vmi, v1.VirtualMachineInstanceDataVolumesReady); c == nil || c.Status != corev1.ConditionTrue ||
		c.Reason != v1.VirtualMachineInstanceReasonAllDVsReady {
		t.Errorf("DataVolumesReady %+v with the Pod created", c)
	}
	pod := podOf(t, vmi)
	found := false
	for _, vol := range pod.Spec.Volumes {
		if vol.PersistentVolumeClaim != nil && vol.PersistentVolumeClaim.ClaimName == "disk" {
			found = true
		}
	}
	if !found {
		t.Errorf("launcher Pod mounts no claim disk: %+v", pod.Spec.Volumes)
	}
}

// TestDataVolumeFailed: a DataVolume that fails while the VMI waits fails
// the VMI with the DataVolume's reason and message, and a Warning event.
func TestDataVolumeFailed(t *testing.T) {
	withCRD(t)
	ns := newNamespace(t, "dv-failed")
	dv := createDV(t, ns, "disk", cluster.DataVolumeStatus{Phase: string(cdi.PhaseImportInProgress)})
	staticClaim(t, ns, "disk", dv)
	startDVController(t, ns)
	createVMI(t, ns, dvVMI("vm1", "disk"))
	waitVMI(t, ns, "vm1", "DataVolumesReady False", dvCondition(corev1.ConditionFalse, v1.VirtualMachineInstanceReasonNotAllDVsReady, "ImportInProgress"))

	const why = "Unable to connect to http data source: expected status code 200, got 404. Status: 404 Not Found"
	setDVStatus(t, ns, "disk", cluster.DataVolumeStatus{Phase: string(cdi.PhaseFailed),
		Conditions: []cluster.DataVolumeCondition{{Type: cdi.ConditionRunning, Status: "False", Reason: "Error", Message: why}}})
	vmi := waitVMI(t, ns, "vm1", "Failed", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Failed })
	if vmi.Status.Reason != ReasonFailedDataVolumeImport {
		t.Errorf("reason %q", vmi.Status.Reason)
	}
	c := condition(vmi, v1.VirtualMachineInstanceSynchronized)
	if c == nil || c.Status != corev1.ConditionFalse || c.Reason != ReasonFailedDataVolumeImport || !strings.Contains(c.Message, "Error: "+why) {
		t.Errorf("Synchronized %+v", c)
	}
	waitEvent(t, ns, "vm1", ReasonFailedDataVolumeImport, why)
	for _, e := range events(t, ns, "vm1") {
		if e.Reason == ReasonFailedDataVolumeImport && e.Type != corev1.EventTypeWarning {
			t.Errorf("event %s is %s", e.Reason, e.Type)
		}
	}
	if pods := launcherPods(t, ns); len(pods) != 0 {
		t.Errorf("launcher Pods of a failed VMI: %d", len(pods))
	}
}

// TestDataVolumeWithoutCDI: without CDI's API a dataVolume volume's claim
// must be Bound; the VMI waits while it is Pending and gets its Pod at once
// when it binds.
func TestDataVolumeWithoutCDI(t *testing.T) {
	withoutCRD(t)
	ns := newNamespace(t, "dv-nocdi")
	staticClaim(t, ns, "disk", nil)
	startDVController(t, ns)
	createVMI(t, ns, dvVMI("vm1", "disk"))
	waitVMI(t, ns, "vm1", "DataVolumesReady False", dvCondition(corev1.ConditionFalse,
		v1.VirtualMachineInstanceReasonNotAllDVsReady, "PersistentVolumeClaim disk (volume root) is Pending"))
	noLauncherPodFor(t, ns, 2*time.Second)

	bindClaim(t, ns, "disk")
	waitPodWithin(t, ns, "vm1", prompt)
}

// TestCDIInstalledLater: CDI's API installed after the controller started
// is found by discovery's re-check, and a VMI waiting (without CDI) for its
// claim to bind proceeds with nothing else changed: under CDI's rules
// (KubeVirt's, CDI's IsSucceededOrPendingPopulation) a claim no DataVolume
// controls is taken as populated. Only the re-check's OnChange can have
// requeued it.
func TestCDIInstalledLater(t *testing.T) {
	withoutCRD(t)
	ns := newNamespace(t, "dv-later")
	staticClaim(t, ns, "disk", nil)
	startDVController(t, ns)
	createVMI(t, ns, dvVMI("vm1", "disk"))
	waitVMI(t, ns, "vm1", "DataVolumesReady False", dvCondition(corev1.ConditionFalse,
		v1.VirtualMachineInstanceReasonNotAllDVsReady, "PersistentVolumeClaim disk (volume root) is Pending"))
	noLauncherPodFor(t, ns, 2*time.Second)

	withCRD(t)
	waitPodWithin(t, ns, "vm1", cdiRecheck+prompt)
}

// TestDataVolumeClaimAppears: with CDI's API, a VMI whose DataVolume and
// claim do not exist yet is Synchronized False with KubeVirt's
// FailedPvcNotFound (the VM's ErrorPvcNotFound); once CDI's DataVolume and
// its claim appear and the DataVolume Succeeded, the Pod is created and the
// reason cleared.
func TestDataVolumeClaimAppears(t *testing.T) {
	withCRD(t)
	ns := newNamespace(t, "dv-appears")
	startDVController(t, ns)
	createVMI(t, ns, dvVMI("vm1", "disk"))
	vmi := waitVMI(t, ns, "vm1", "Synchronized False, FailedPvcNotFound", func(v *v1.VirtualMachineInstance) bool {
		c := condition(v, v1.VirtualMachineInstanceSynchronized)
		return c != nil && c.Status == corev1.ConditionFalse && c.Reason == vmistatus.ReasonPVCNotFound &&
			strings.Contains(c.Message, `PersistentVolumeClaim "disk" (volume "root") not found, waiting for it to appear`)
	})
	if c := condition(vmi, v1.VirtualMachineInstanceDataVolumesReady); c == nil || c.Status != corev1.ConditionFalse {
		t.Errorf("DataVolumesReady %+v while the claim is missing", c)
	}

	dv := createDV(t, ns, "disk", cluster.DataVolumeStatus{Phase: string(cdi.PhaseImportInProgress)})
	staticClaim(t, ns, "disk", dv)
	waitVMI(t, ns, "vm1", "DataVolumesReady False, importing", dvCondition(corev1.ConditionFalse,
		v1.VirtualMachineInstanceReasonNotAllDVsReady, "ImportInProgress"))
	bindClaim(t, ns, "disk")
	setDVStatus(t, ns, "disk", cluster.DataVolumeStatus{Phase: string(cdi.PhaseSucceeded)})
	vmi = waitPodWithin(t, ns, "vm1", prompt)
	if c := condition(vmi, v1.VirtualMachineInstanceSynchronized); c != nil {
		t.Errorf("Synchronized kept with the Pod created: %+v", c)
	}
}

// TestCDIRemoved: CDI's API going away while a VMI waits for an importing
// DataVolume switches the VMI to the rules without CDI (its claim must be
// Bound), found by discovery's re-check; the claim bound, the Pod comes.
func TestCDIRemoved(t *testing.T) {
	if err := shared.InstallDataVolumeCRD(); err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t, "dv-removed")
	dv := createDV(t, ns, "disk", cluster.DataVolumeStatus{Phase: string(cdi.PhaseImportInProgress)})
	staticClaim(t, ns, "disk", dv)
	startDVController(t, ns)
	createVMI(t, ns, dvVMI("vm1", "disk"))
	waitVMI(t, ns, "vm1", "DataVolumesReady False, importing", dvCondition(corev1.ConditionFalse,
		v1.VirtualMachineInstanceReasonNotAllDVsReady, "ImportInProgress"))

	withoutCRD(t)
	waitVMI(t, ns, "vm1", "DataVolumesReady False, claim Pending", dvCondition(corev1.ConditionFalse,
		v1.VirtualMachineInstanceReasonNotAllDVsReady, "PersistentVolumeClaim disk (volume root) is Pending"))
	if pods := launcherPods(t, ns); len(pods) != 0 {
		t.Fatalf("%d launcher Pods for an unbound claim", len(pods))
	}
	bindClaim(t, ns, "disk")
	waitPodWithin(t, ns, "vm1", prompt)
}
