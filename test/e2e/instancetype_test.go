//go:build cluster && qemu

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestInstancetypeVM: a VM naming an instance type and a preference,
// installed with kemu's CRDs by kubectl apply -k, runs a VMI with the
// instance type's CPUs and memory in the preference's topology: the guest
// reports them. The VM records the revision it started from.
func TestInstancetypeVM(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const name = "sized"
	t.Cleanup(func() {
		ev.c.Kubectl("-n", ns, "delete", "vm", name, "--ignore-not-found", "--timeout=3m")                                                    //nolint:errcheck // best effort
		ev.c.Kubectl("-n", ns, "delete", "virtualmachineinstancetype,virtualmachinepreference", "-l", "kemu-e2e="+name, "--ignore-not-found") //nolint:errcheck // best effort
	})
	ev.apply(t, fmt.Sprintf(`apiVersion: instancetype.kemu.dev/v1beta1
kind: VirtualMachineInstancetype
metadata: {name: %[1]s-small, namespace: %[2]s, labels: {kemu-e2e: %[1]s}}
spec:
  cpu: {guest: 2}
  memory: {guest: 192Mi}
---
apiVersion: instancetype.kemu.dev/v1beta1
kind: VirtualMachinePreference
metadata: {name: %[1]s-cores, namespace: %[2]s, labels: {kemu-e2e: %[1]s}}
spec:
  cpu: {preferredCPUTopology: cores}
---
apiVersion: kemu.dev/v1alpha1
kind: VirtualMachine
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  runStrategy: Always
  instancetype: {kind: VirtualMachineInstancetype, name: %[1]s-small}
  preference: {kind: VirtualMachinePreference, name: %[1]s-cores}
  template:
    metadata: {labels: {kemu-e2e: %[1]s}}
    spec:
      domain:
        firmware:
          kernelBoot:
            kernelArgs: console=ttyS0 kemu.dhcp=0
            container: {image: %[3]s, imagePullPolicy: IfNotPresent, kernelPath: /boot/vmlinuz, initrdPath: /boot/initrd.img}
        devices: {autoattachPodInterface: false}
`, name, ns, kernelBootImage))
	vmi := ev.waitRunning(ctx, t, name, bootTimeout)
	if c := vmi.Spec.Domain.CPU; c == nil || c.Sockets != 1 || c.Cores != 2 || c.Threads != 1 {
		t.Errorf("VMI cpu %+v, want 1 socket × 2 cores (the preference's topology)", c)
	}
	if m := vmi.Spec.Domain.Memory; m == nil || m.Guest == nil || m.Guest.String() != "192Mi" {
		t.Errorf("VMI memory %+v, want guest 192Mi", m)
	}
	ready := ev.readyMarker(ctx, t, name)
	if ready.Field("cpus") != "2" {
		t.Errorf("the guest has %q CPUs, want 2: %s", ready.Field("cpus"), ready.Raw)
	}
	vm, err := ev.kemu.KemuV1alpha1().VirtualMachines(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if vm.Status.InstancetypeRef == nil || vm.Status.InstancetypeRef.ControllerRevisionRef == nil ||
		vm.Status.InstancetypeRef.ControllerRevisionRef.Name == "" {
		t.Errorf("VM status.instancetypeRef %+v: no revision recorded", vm.Status.InstancetypeRef)
	} else if _, err := ev.kube.AppsV1().ControllerRevisions(ns).Get(ctx, vm.Status.InstancetypeRef.ControllerRevisionRef.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the recorded revision: %v", err)
	}
	ev.kubectl(t, "-n", ns, "delete", "vm", name, "--timeout=3m")
	ev.waitPodsGone(ctx, t, "kemu.dev/vmi-name="+name)
}
