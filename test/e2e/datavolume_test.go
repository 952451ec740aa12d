//go:build cluster && qemu

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/cdi"
	"github.com/kemu-dev/kemu/test/cluster"
)

// TestDataVolumeBoot: a VMI whose root disk is a dataVolume volume boots
// the test guest from the claim. CDI's real CRD and controller are not
// available offline: the test installs the stand-in DataVolume CRD
// (test/cluster), waits until kemu-controller's discovery has found it,
// and plays CDI's part: a DataVolume it marks Succeeded, controlling a
// claim bound to a hostPath PersistentVolume that holds the guest's disk
// as raw disk.img.
func TestDataVolumeBoot(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const name = "dvboot"
	node := ev.c.Nodes[0].Name
	dir, err := os.MkdirTemp("/var/tmp", "kemu-e2e-dv-") // the same path on the host and in the nodes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ev.c.Kubectl("-n", ns, "delete", "vmi", name, "--ignore-not-found", "--timeout=3m")        //nolint:errcheck // best effort
		ev.c.Kubectl("-n", ns, "delete", "pvc", name, "--ignore-not-found", "--timeout=1m")        //nolint:errcheck // best effort
		ev.c.Kubectl("delete", "pv", ns+"-"+name, "--ignore-not-found", "--timeout=1m")            //nolint:errcheck // best effort
		ev.c.Kubectl("delete", "crd", cluster.DataVolumeCRD, "--ignore-not-found", "--timeout=1m") //nolint:errcheck // best effort
		os.RemoveAll(dir)
	})
	t.Cleanup(func() { // runs before the deletes above
		if t.Failed() {
			logs, stderr, _ := ev.c.Kubectl("-n", ns, "logs", "-l", launcherpod.AppLabel+"="+launcherpod.AppLauncher,
				"--all-containers", "--tail=40")
			t.Logf("launcher logs:\n%s%s", logs, stderr)
		}
	})
	// A provisioner's folder: QEMU (uid 107) must reach disk.img in it; the
	// launcher gives it the image, as CDI's importer leaves it 107's.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, "qemu-img", "convert", "-O", "raw",
		filepath.Join(ev.root, "_out/testguest/disk.qcow2"), filepath.Join(dir, "disk.img")).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img convert: %v\n%s", err, out)
	}

	// kemu-controller asks discovery every 30 s: wait for its log line.
	if err := ev.c.InstallDataVolumeCRD(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	err = poll(ctx, time.Second, func() error {
		logs, stderr, err := ev.c.Kubectl("-n", kemuNS, "logs", "deploy/kemu-controller")
		if err != nil {
			return fmt.Errorf("%v: %s", err, stderr)
		}
		if !strings.Contains(logs, "CDI's API is installed") {
			return fmt.Errorf("kemu-controller has not found CDI's API yet")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kemu-controller found CDI's API %s after the CRD", time.Since(t0).Round(time.Millisecond))

	dv, err := ev.c.CreateDataVolume(ctx, ns, name, map[string]any{
		"source":  map[string]any{"http": map[string]any{"url": "http://images.example/testguest.img"}},
		"storage": map[string]any{"resources": map[string]any{"requests": map[string]any{"storage": "128Mi"}}},
	}, cluster.DataVolumeStatus{Phase: string(cdi.PhaseSucceeded), Progress: "100.0%"})
	if err != nil {
		t.Fatal(err)
	}
	ev.apply(t, fmt.Sprintf(`apiVersion: v1
kind: PersistentVolume
metadata: {name: %[2]s-%[1]s}
spec:
  capacity: {storage: 128Mi}
  accessModes: [ReadWriteOnce]
  volumeMode: Filesystem
  storageClassName: ""
  hostPath: {path: %[3]s, type: Directory}
  claimRef: {namespace: %[2]s, name: %[1]s}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [%[4]s]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: %[1]s
  namespace: %[2]s
  ownerReferences:
  - {apiVersion: cdi.kubevirt.io/v1beta1, kind: DataVolume, name: %[1]s, uid: %[5]s, controller: true, blockOwnerDeletion: true}
spec:
  accessModes: [ReadWriteOnce]
  volumeMode: Filesystem
  storageClassName: ""
  volumeName: %[2]s-%[1]s
  resources: {requests: {storage: 128Mi}}
---
apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  domain:
    memory: {guest: 128Mi}
    devices:
      autoattachPodInterface: false
      disks: [{name: root, disk: {bus: virtio}}]
  volumes: [{name: root, dataVolume: {name: %[1]s}}]
`, name, ns, dir, node, dv.GetUID()))

	vmi := ev.waitRunning(ctx, t, name, bootTimeout)
	if c := condition(vmi, v1.VirtualMachineInstanceDataVolumesReady); c == nil || c.Status != corev1.ConditionTrue ||
		c.Reason != v1.VirtualMachineInstanceReasonAllDVsReady {
		t.Errorf("DataVolumesReady %+v", c)
	}
	if vmi.Status.NodeName != node {
		t.Errorf("node %s, want the PV's %s", vmi.Status.NodeName, node)
	}
	con := ev.startConsole(t, name)
	if err := con.waitFor(ctx, "KEMU-GUEST ready", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	con.stop()
	pvc, err := ev.kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("guest booted from claim %s (%s, volume %s)", name, pvc.Status.Phase, pvc.Spec.VolumeName)
}
