//go:build cluster && qemu

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/test/testguest"
)

// bootTimeout bounds a VMI's create → Running under TCG on shared cores
// (hang protection only: it takes seconds).
const bootTimeout = 5 * time.Minute

// webUserData is the cloud-init script the test guest runs after `ready`:
// busybox httpd serving a known page on the port the VMI exposes.
const webUserData = `#!/bin/sh
mkdir -p /tmp/www
echo kemu-e2e-hello > /tmp/www/index.html
httpd -p 8080 -h /tmp/www
echo kemu-e2e-httpd-started
`

// TestContainerDiskVMI: a VMI applied with kubectl — containerDisk from the
// node's image store, cloud-init NoCloud user data, masquerade on the pod
// network with port 8080 — runs, its guest agent connects, kubectl shows it,
// the guest's httpd answers on the pod IP from the node; then kemuctl
// pause/unpause, console and shell work through its launcher Pod; finally
// kubectl delete powers the guest off with ACPI, the VMI ends Succeeded and
// its Pod goes.
func TestContainerDiskVMI(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	const name = "web"
	t.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vmi", name, "--ignore-not-found", "--timeout=3m") }) //nolint:errcheck // best effort

	t0 := time.Now()
	ev.apply(t, vmiManifest(vmiOptions{name: name, userData: webUserData, ports: []int{8080}, labels: map[string]string{"kemu-e2e": name}}))
	vmi := ev.waitRunning(ctx, t, name, bootTimeout)
	t.Logf("kubectl apply → Running in %s (node %s, pod %s)", time.Since(t0).Round(time.Millisecond), vmi.Status.NodeName, vmi.Status.LauncherPod)
	if ev.c.Node(vmi.Status.NodeName) == nil {
		t.Errorf("status.nodeName %q is none of the cluster's nodes", vmi.Status.NodeName)
	}
	// QEMU runs in its cgroup v2 device allowlist inside the launcher Pod.
	if c := condition(vmi, v1.VirtualMachineInstanceDevicesConfined); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("DevicesConfined condition %+v, want True", c)
	} else {
		t.Logf("DevicesConfined: %s %s", c.Reason, c.Message)
	}
	ev.waitCondition(ctx, t, name, v1.VirtualMachineInstanceAgentConnected, corev1.ConditionTrue, bootTimeout)
	t.Logf("AgentConnected %s after apply", time.Since(t0).Round(time.Millisecond))

	// kubectl get vmi: phase, node, IP (the printer columns).
	var ip string
	err := poll(ctx, 500*time.Millisecond, func() error {
		vmi, err := ev.getVMI(ctx, name)
		if err != nil || vmi == nil {
			return fmt.Errorf("VMI: %v", err)
		}
		if len(vmi.Status.Interfaces) == 0 || vmi.Status.Interfaces[0].IPAddress == "" {
			return fmt.Errorf("no interface IP yet: %+v", vmi.Status.Interfaces)
		}
		ip = vmi.Status.Interfaces[0].IPAddress
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out := ev.kubectl(t, "-n", ns, "get", "vmi", name)
	t.Logf("kubectl get vmi %s:\n%s", name, out)
	for _, want := range []string{"Running", vmi.Status.NodeName, ip} {
		if !regexp.MustCompile(`(?m)^` + name + `\s.*\b` + regexp.QuoteMeta(want) + `\b`).MatchString(out) {
			t.Errorf("kubectl get vmi shows no %q:\n%s", want, out)
		}
	}
	pod, err := ev.kube.CoreV1().Pods(ns).Get(ctx, vmi.Status.LauncherPod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Status.PodIP != ip {
		t.Errorf("VMI IP %s is not its launcher Pod's IP %s (masquerade: the guest is reached on the pod IP)", ip, pod.Status.PodIP)
	}

	// The guest's httpd, from the node's root network namespace, through
	// the pod IP (masquerade DNAT of port 8080 to the guest).
	t.Run("httpd on the pod IP", func(t *testing.T) {
		url := fmt.Sprintf("http://%s:8080/index.html", ip)
		hc := &http.Client{Timeout: 5 * time.Second}
		var body string
		ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		err := poll(ctx, time.Second, func() error {
			resp, err := hc.Get(url)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			body = string(b)
			if resp.StatusCode != http.StatusOK || !strings.Contains(body, "kemu-e2e-hello") {
				return fmt.Errorf("GET %s: %s %q", url, resp.Status, body)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("GET %s → %q (%s after apply)", url, strings.TrimSpace(body), time.Since(t0).Round(time.Millisecond))
	})

	t.Run("pause unpause", func(t *testing.T) {
		ev.run(ctx, t, "pause", name, "-n", ns)
		vmi, err := ev.getVMI(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if c := condition(vmi, v1.VirtualMachineInstancePaused); c == nil || c.Status != corev1.ConditionTrue {
			t.Fatalf("after kemuctl pause: Paused condition %+v", c)
		} else {
			t.Logf("Paused: %s %s", c.Status, c.Reason)
		}
		if vmi.Status.Phase != v1.Running {
			t.Errorf("paused VMI phase %s, want Running", vmi.Status.Phase)
		}
		out := ev.run(ctx, t, "shell", name, "-n", ns, "-c", "status")
		if !strings.Contains(out, "Paused") {
			t.Errorf("kemuctl shell -c status of a paused VMI:\n%s", out)
		}
		ev.run(ctx, t, "unpause", name, "-n", ns)
		vmi, err = ev.getVMI(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if c := condition(vmi, v1.VirtualMachineInstancePaused); c != nil && c.Status == corev1.ConditionTrue {
			t.Fatalf("after kemuctl unpause: Paused condition %+v", c)
		}
		// The node agent's events, in order, in kubectl describe.
		err = poll(ctx, 500*time.Millisecond, func() error {
			out := ev.kubectl(t, "-n", ns, "describe", "vmi", name)
			_, events, _ := strings.Cut(out, "\nEvents:")
			return inOrder(events, "Started", "Paused", "Unpaused")
		})
		if err != nil {
			t.Error(err)
		}
	})

	t.Run("console", func(t *testing.T) {
		con := ev.startConsole(t, name)
		if err := con.waitFor(ctx, "KEMU-GUEST tick", 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		t.Logf("kemuctl console:\n%s", tail(con.out.String(), 400))
		con.stop()
	})

	t.Run("shell status", func(t *testing.T) {
		out := ev.run(ctx, t, "shell", name, "-n", ns, "-c", "status")
		t.Logf("kemuctl shell %s -c status:\n%s", name, out)
		if !strings.Contains(out, "Running") {
			t.Errorf("status does not say Running:\n%s", out)
		}
	})

	// Issue 24: killing kemuctl shell VMI (the client of an exec into the
	// launcher Pod) ends the shell it started in the compute container; it
	// used to run, holding its launcher streams, until the Pod died.
	t.Run("shell ends with its killed client", func(t *testing.T) {
		cmd := exec.CommandContext(ctx, ev.kemuctl, "shell", name, "-n", ns, "-c", "events", "--kubeconfig", ev.c.Kubeconfig)
		var out testguest.SyncBuffer // read while kemuctl writes
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killed := false
		t.Cleanup(func() {
			if !killed {
				cmd.Process.Kill() //nolint:errcheck // best effort
				cmd.Wait()         //nolint:errcheck // best effort
			}
		})
		var remote int
		err := poll(ctx, 200*time.Millisecond, func() error {
			pids := remoteShells()
			if len(pids) != 1 {
				return fmt.Errorf("%d remote kemuctl shell processes (%v); client output: %q", len(pids), pids, out.String())
			}
			remote = pids[0]
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		cmd.Wait() //nolint:errcheck // killed
		killed = true
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		defer wcancel()
		err = poll(wctx, 100*time.Millisecond, func() error {
			if slices.Contains(remoteShells(), remote) {
				return fmt.Errorf("the remote shell (host pid %d) still runs", remote)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("remote shell (host pid %d) gone %s after its client was killed", remote, time.Since(t0).Round(time.Millisecond))
	})

	t.Run("delete powers off with ACPI", func(t *testing.T) {
		con := ev.startConsole(t, name)
		if err := con.waitFor(ctx, "KEMU-GUEST tick", 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		pw := ev.watchPhases(ctx, t, "kemu-e2e="+name)
		t0 := time.Now()
		ev.kubectl(t, "-n", ns, "delete", "vmi", name, "--wait=false")
		if err := con.waitFor(ctx, "KEMU-GUEST poweroff source=acpi", 3*time.Minute); err != nil {
			t.Fatal(err)
		}
		t.Logf("guest: poweroff source=acpi %s after kubectl delete", time.Since(t0).Round(time.Millisecond))
		wctx, wcancel := context.WithTimeout(ctx, 3*time.Minute)
		defer wcancel()
		if _, err := pw.waitFor(wctx, func(e phaseEvent) bool { return e.name == name && e.phase == v1.Succeeded }); err != nil {
			t.Fatalf("VMI never Succeeded: %v", err)
		}
		t.Logf("VMI Succeeded %s after kubectl delete", time.Since(t0).Round(time.Millisecond))
		ev.waitPodsGone(ctx, t, "kemu.dev/vmi-name="+name)
		err := poll(wctx, 500*time.Millisecond, func() error {
			if vmi, err := ev.getVMI(ctx, name); err != nil || vmi != nil {
				return fmt.Errorf("VMI still there (%v)", err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("Pod and VMI gone %s after kubectl delete; phases: %s", time.Since(t0).Round(time.Millisecond), pw.summary())
		// Its events outlive it: the lifecycle, in order.
		evs, err := ev.vmiEvents(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("events of %s: %s", name, eventReasons(evs))
		if err := inOrder(eventReasons(evs), "Started", "Paused", "Unpaused", "ShuttingDown", "Shutdown"); err != nil {
			t.Error(err)
		}
	})
}

// remoteShells lists the host pids of `kemuctl shell --socket … -c events`
// processes (what kemuctl shell VMI -c events runs in a launcher Pod; the
// test nodes share the host's pid namespace view).
func remoteShells() []int {
	var pids []int
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) > 3 && filepath.Base(args[0]) == "kemuctl" && args[1] == "shell" && slices.Contains(args, "--socket") && slices.Contains(args, "events") {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// inOrder says whether each word occurs in s after the one before it.
func inOrder(s string, words ...string) error {
	at := 0
	for _, w := range words {
		i := regexp.MustCompile(`\b` + w + `\b`).FindStringIndex(s[at:])
		if i == nil {
			return fmt.Errorf("no %s after %q in:\n%s", w, s[:at], s)
		}
		at += i[1]
	}
	return nil
}

// TestKernelBootVMI: a VMI booting the test guest's kernel and initramfs
// from the kernelboot image (firmware.kernelBoot.container, kernelArgs
// console=ttyS0) runs and its guest boots (loader=direct).
func TestKernelBootVMI(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const name = "kboot"
	t.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vmi", name, "--ignore-not-found", "--timeout=3m") }) //nolint:errcheck // best effort
	// kemu.local/testguest/kernelboot:latest is only in the node's
	// containerd (no registry): the launcher Pod's init container copies
	// the kernel and initrd out of it.
	t0 := time.Now()
	ev.apply(t, vmiManifest(vmiOptions{name: name, kernel: true, noNetwork: true, labels: map[string]string{"kemu-e2e": name}}))
	ev.waitRunning(ctx, t, name, bootTimeout)
	t.Logf("kernel boot VMI Running %s after apply", time.Since(t0).Round(time.Millisecond))
	con := ev.startConsole(t, name)
	if err := con.waitFor(ctx, "KEMU-GUEST ready", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`KEMU-GUEST boot \S+ \S+ \S+ loader=(\S+)`).FindStringSubmatch(con.out.String()); m != nil && m[1] != "direct" {
		t.Errorf("guest booted with loader=%s, want direct (kernel boot)", m[1])
	}
	con.stop()
	ev.deleteVMI(ctx, t, name)
}

// TestVMRunStrategyAlways: QEMU of a VM's VMI killed on the host → a new
// VMI (new UID) of the VM comes up Running.
func TestVMRunStrategyAlways(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	const name = "always"
	t.Cleanup(func() {
		ev.c.Kubectl("-n", ns, "delete", "vm", name, "--ignore-not-found", "--timeout=3m") //nolint:errcheck // best effort
	})
	ev.apply(t, vmiManifest(vmiOptions{kind: "VirtualMachine", name: name, labels: map[string]string{"kemu-e2e": name}}))
	vmi := ev.waitRunning(ctx, t, name, bootTimeout)
	pid := qemuPid(ctx, t, name)
	pw := ev.watchPhases(ctx, t, "kemu-e2e="+name)
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed QEMU (host pid %d) of VMI %s (uid %s)", pid, name, vmi.UID)
	wctx, wcancel := context.WithTimeout(ctx, 2*bootTimeout)
	defer wcancel()
	ended, err := pw.waitFor(wctx, func(e phaseEvent) bool { return e.uid == string(vmi.UID) && e.phase.IsFinal() })
	if err != nil {
		t.Fatalf("the VMI whose QEMU died did not end: %v", err)
	}
	t.Logf("old VMI %s %s after the kill", ended.phase, ended.at.Sub(t0).Round(time.Millisecond))
	up, err := pw.waitFor(wctx, func(e phaseEvent) bool {
		return e.name == name && e.uid != string(vmi.UID) && e.phase == v1.Running && e.typ != watch.Deleted
	})
	if err != nil {
		t.Fatalf("no new VMI Running: %v", err)
	}
	t.Logf("new VMI (uid %s) Running %s after the kill; phases: %s", up.uid, up.at.Sub(t0).Round(time.Millisecond), pw.summary())
	if p := qemuPid(ctx, t, name); p == pid {
		t.Errorf("new VMI runs in the killed QEMU pid %d", p)
	}
	vm, err := ev.kemu.KemuV1alpha1().VirtualMachines(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("VM %s: printableStatus %s ready %v", name, vm.Status.PrintableStatus, vm.Status.Ready)
	ev.kubectl(t, "-n", ns, "delete", "vm", name, "--timeout=3m")
	ev.waitPodsGone(ctx, t, "kemu.dev/vmi-name="+name)
}

// TestKillLauncher: the launcher process of a VMI's Pod SIGKILLed on the
// host → the VMI fails with a reason and no QEMU of it is left.
func TestKillLauncher(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const name = "victim"
	t.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vmi", name, "--ignore-not-found", "--timeout=3m") }) //nolint:errcheck // best effort
	ev.apply(t, vmiManifest(vmiOptions{name: name, labels: map[string]string{"kemu-e2e": name}}))
	vmi := ev.waitRunning(ctx, t, name, bootTimeout)
	qemu := qemuPid(ctx, t, name)
	pod, err := ev.kube.CoreV1().Pods(ns).Get(ctx, vmi.Status.LauncherPod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	launcher, err := launcherPid(string(pod.UID))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("QEMU host pid %d, its ancestors %v; the Pod's kemu-launcher: host pid %d", qemu, ancestors(qemu), launcher)
	t0 := time.Now()
	if err := syscall.Kill(launcher, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed kemu-launcher (host pid %d, QEMU %d)", launcher, qemu)
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer wcancel()
	err = poll(wctx, 250*time.Millisecond, func() error {
		v, err := ev.getVMI(ctx, name)
		if err != nil || v == nil {
			return fmt.Errorf("VMI: %v", err)
		}
		if v.Status.Phase != v1.Failed {
			return fmt.Errorf("phase %s", v.Status.Phase)
		}
		vmi = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	msg := ""
	if c := condition(vmi, v1.VirtualMachineInstanceReady); c != nil {
		msg = c.Reason + ": " + c.Message
	}
	t.Logf("VMI Failed %s after the kill: reason %q (Ready %s)", time.Since(t0).Round(time.Millisecond), vmi.Status.Reason, msg)
	if vmi.Status.Reason == "" {
		t.Errorf("Failed VMI without status.reason: %+v", vmi.Status)
	}
	err = poll(wctx, 250*time.Millisecond, func() error {
		if p := qemuPids(name); len(p) > 0 {
			return fmt.Errorf("QEMU of %s still running: %v", name, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ev.deleteVMI(ctx, t, name)
}

// TestNodeAgentRestart: the node agent's Pod on the first node deleted (the
// DaemonSet makes a new one) while three VMIs run there → no QEMU restarts,
// no VMI leaves Running.
func TestNodeAgentRestart(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	names := []string{"keep-1", "keep-2", "keep-3"}
	sel := "kemu-e2e=restart"
	node := ev.c.Nodes[0].Name
	t.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vmi", "-l", sel, "--ignore-not-found", "--timeout=3m") }) //nolint:errcheck // best effort
	var docs []string
	for _, n := range names {
		docs = append(docs, vmiManifest(vmiOptions{name: n, node: node, labels: map[string]string{"kemu-e2e": "restart"}}))
	}
	ev.apply(t, strings.Join(docs, "---\n"))
	pids := map[string]int{}
	uids := map[string]string{}
	for _, n := range names {
		vmi := ev.waitRunning(ctx, t, n, bootTimeout)
		uids[n] = string(vmi.UID)
		pids[n] = qemuPid(ctx, t, n)
	}
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer wcancel()
	if err := ev.launcherConnections(wctx, node, len(names)); err != nil {
		t.Fatal(err)
	}
	old, err := ev.kube.CoreV1().Pods(kemuNS).List(ctx, metav1.ListOptions{LabelSelector: nodeagentSelector, FieldSelector: "spec.nodeName=" + node})
	if err != nil || len(old.Items) != 1 {
		t.Fatalf("node agent Pods on %s: %v %d", node, err, len(old.Items))
	}
	pw := ev.watchPhases(ctx, t, sel)
	t0 := time.Now()
	ev.kubectl(t, "-n", kemuNS, "delete", "pod", old.Items[0].Name, "--timeout=2m")
	t.Logf("node agent Pod %s deleted in %s", old.Items[0].Name, time.Since(t0).Round(time.Millisecond))
	var newPod string
	err = poll(wctx, 500*time.Millisecond, func() error {
		p, err := ev.nodeAgentPod(ctx, node)
		if err != nil {
			return err
		}
		if p.Name == old.Items[0].Name {
			return fmt.Errorf("no new node agent Pod Ready")
		}
		newPod = p.Name
		return nil
	})
	if err == nil {
		err = ev.launcherConnections(wctx, node, len(names))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("new node agent Pod %s Ready and connected to %d launchers %s after the delete", newPod, len(names), time.Since(t0).Round(time.Millisecond))
	// Let the new agent sync and recompute every status (its first Sync,
	// WatchDomain and status pass) — and check through a later read that
	// nothing moved.
	err = poll(wctx, 500*time.Millisecond, func() error {
		out, _, err := ev.c.Kubectl("-n", kemuNS, "logs", newPod)
		if err != nil {
			return err
		}
		for _, n := range names {
			if !strings.Contains(out, n) {
				return fmt.Errorf("new node agent has not logged VMI %s yet", n)
			}
		}
		return nil
	})
	if err != nil {
		t.Logf("(the new agent's log does not name every VMI: %v)", err)
	}
	for _, n := range names {
		vmi, err := ev.getVMI(ctx, n)
		if err != nil || vmi == nil {
			t.Fatalf("VMI %s: %v", n, err)
		}
		if vmi.Status.Phase != v1.Running || string(vmi.UID) != uids[n] {
			t.Errorf("VMI %s after the restart: phase %s uid %s (was Running, %s)", n, vmi.Status.Phase, vmi.UID, uids[n])
		}
		if p := qemuPids(n); len(p) != 1 || p[0] != pids[n] {
			t.Errorf("VMI %s: QEMU pids %v after the node agent restart, before %d", n, p, pids[n])
		}
	}
	for _, e := range pw.snapshot() {
		if e.phase != v1.Running {
			t.Errorf("phase flap during the node agent restart: %s %s %s at %s", e.typ, e.name, e.phase, e.at.Format("15:04:05.000"))
		}
	}
	t.Logf("QEMU pids unchanged %v; VMI changes during the restart: %s", pids, pw.summary())
	ev.kubectl(t, "-n", ns, "delete", "vmi", "-l", sel, "--timeout=3m")
	ev.waitPodsGone(ctx, t, "kemu-e2e=restart")
}
