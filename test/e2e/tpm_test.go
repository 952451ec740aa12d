//go:build cluster && qemu

package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kemu-dev/kemu/api/launcherpod"
	"github.com/kemu-dev/kemu/test/testguest"
)

// TestPersistentTPM: a VM with a persistent TPM (domain.devices.tpm.
// persistent). kemu-controller creates its backend storage claim,
// persistent-state-for-<vm>, owned by the VM; the test plays the
// provisioner with a hostPath PersistentVolume bound to that claim (the
// cluster has no dynamic provisioner). The guest defines a TPM NV index
// and writes 8 random bytes into it; the VM is stopped (runStrategy
// Halted: its VMI and launcher Pod go) and started again; the new guest
// reads the same 8 bytes from its TPM. Deleting the VM deletes the claim
// (garbage collection through its owner reference).
func TestPersistentTPM(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	const name = "tpmstate"
	claim := launcherpod.BackendStoragePVCName(name)
	node := ev.c.Nodes[0].Name
	dir, err := os.MkdirTemp("/var/tmp", "kemu-e2e-tpm-") // the same path on the host and in the nodes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ev.c.Kubectl("-n", ns, "delete", "vm", name, "--ignore-not-found", "--timeout=3m")   //nolint:errcheck // best effort
		ev.c.Kubectl("-n", ns, "delete", "pvc", claim, "--ignore-not-found", "--timeout=1m") //nolint:errcheck // best effort
		ev.c.Kubectl("delete", "pv", ns+"-"+name, "--ignore-not-found", "--timeout=1m")      //nolint:errcheck // best effort
		os.RemoveAll(dir)
	})
	t.Cleanup(func() { // runs before the deletes above
		if t.Failed() {
			logs, stderr, _ := ev.c.Kubectl("-n", ns, "logs", "-l", launcherpod.AppLabel+"="+launcherpod.AppLauncher,
				"--all-containers", "--tail=40")
			t.Logf("launcher logs:\n%s%s", logs, stderr)
		}
	})
	// A provisioner's folder, root's and private: swtpm (107) works in the
	// launcher's descriptor of swtpm/, not through this path.
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ev.apply(t, fmt.Sprintf(`apiVersion: v1
kind: PersistentVolume
metadata: {name: %[2]s-%[1]s}
spec:
  capacity: {storage: 10Mi}
  accessModes: [ReadWriteOnce]
  volumeMode: Filesystem
  storageClassName: ""
  hostPath: {path: %[3]s, type: Directory}
  claimRef: {namespace: %[2]s, name: %[5]s}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [%[4]s]}]
---
apiVersion: kemu.dev/v1alpha1
kind: VirtualMachine
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  runStrategy: Always
  template:
    spec:
      domain:
        memory: {guest: 128Mi}
        firmware:
          kernelBoot:
            kernelArgs: console=ttyS0 kemu.dhcp=0
            container: {image: %[6]s, imagePullPolicy: IfNotPresent, kernelPath: /boot/vmlinuz, initrdPath: /boot/initrd.img}
        devices:
          autoattachPodInterface: false
          tpm: {persistent: true}
          disks: [{name: cloudinit, disk: {bus: virtio}}]
      volumes:
      - name: cloudinit
        cloudInitNoCloud:
          userData: |
%[7]s`, name, ns, dir, node, claim, kernelBootImage, indent(consoleShellUserData, "            ")))

	var data [8]byte
	if _, err := rand.Read(data[:]); err != nil {
		t.Fatal(err)
	}
	// boot waits for the VMI's guest shell and runs check there: the NV
	// index written on the first boot, read on both.
	boot := func(first bool) {
		t.Helper()
		t0 := time.Now()
		vmi := ev.waitRunning(ctx, t, name, bootTimeout)
		con := ev.startConsole(t, name)
		defer con.stop()
		if err := con.waitFor(ctx, "KEMU-GUEST console-shell", bootTimeout); err != nil {
			t.Fatal(err)
		}
		t.Logf("first %v: VMI %s running with its guest shell %s after the start", first, vmi.UID, time.Since(t0).Round(time.Second))
		if first {
			// Typed again until seen: a second NV_DefineSpace finds the
			// index defined.
			cmd := fmt.Sprintf(`a=$%s; b=$%s; case "$a/$b" in %s*/%s*|%s*/%s*) echo "tpm-nv-$((6*7))-written";; *) echo "tpm-nv-failed $a $b";; esac`,
				testguest.TPMCommand(testguest.TPMNVDefineSpace), testguest.TPMCommand(testguest.TPMNVWrite(data)),
				testguest.TPMSessionsOK, testguest.TPMSessionsOK, testguest.TPMNVDefined, testguest.TPMSessionsOK)
			if err := con.runInShell(ctx, cmd, "tpm-nv-42-written", 2*time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		want := testguest.TPMNVReadOK(data)
		if err := con.runInShell(ctx, `echo "tpm-read-$`+testguest.TPMCommand(testguest.TPMNVRead)+`-end"`, want, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	boot(true)

	pvc, err := ev.kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vm, err := ev.kemu.KemuV1alpha1().VirtualMachines(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if owner := metav1.GetControllerOf(pvc); owner == nil || owner.UID != vm.UID || pvc.Status.Phase != corev1.ClaimBound {
		t.Errorf("claim %s: owner %+v (VM %s), phase %s", claim, owner, vm.UID, pvc.Status.Phase)
	}
	if st, err := os.Stat(dir + "/swtpm/tpm2-00.permall"); err != nil {
		t.Errorf("the TPM's state on the volume: %v", err)
	} else {
		t.Logf("the TPM's state on the claim's volume: tpm2-00.permall, %d bytes", st.Size())
	}

	first, err := ev.getVMI(ctx, name)
	if err != nil || first == nil {
		t.Fatalf("VMI: %v", err)
	}
	ev.kubectl(t, "-n", ns, "patch", "vm", name, "--type=merge", "-p", `{"spec":{"runStrategy":"Halted"}}`)
	err = poll(ctx, time.Second, func() error {
		cur, err := ev.getVMI(ctx, name)
		if err != nil {
			return err
		}
		if cur != nil {
			return fmt.Errorf("VMI %s still there (phase %s)", name, cur.Status.Phase)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ev.waitPodsGone(ctx, t, launcherpod.CreatedByLabel+"="+string(first.UID))
	ev.kubectl(t, "-n", ns, "patch", "vm", name, "--type=merge", "-p", `{"spec":{"runStrategy":"Always"}}`)
	boot(false)

	ev.kubectl(t, "-n", ns, "delete", "vm", name, "--timeout=3m")
	err = poll(ctx, time.Second, func() error {
		_, err := ev.kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("claim %s still there (%v)", claim, err)
	})
	if err != nil {
		t.Error(err)
	}
}
