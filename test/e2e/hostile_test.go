//go:build cluster && qemu

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"kernel.org/pub/linux/libs/security/libcap/cap"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/controller/template"
	"github.com/kemu-dev/kemu/launcher/dropcaps"
	"github.com/kemu-dev/kemu/launcher/unpriv"
)

// The tenant: a ServiceAccount of the VMIs' namespace with the RBAC a VMI's
// author gets (docs/deploy.md): VMIs and VMs, and reading Pods.
const tenantRBAC = `apiVersion: v1
kind: ServiceAccount
metadata: {name: tenant, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: vm-author, namespace: default}
rules:
- apiGroups: [kemu.dev]
  resources: [virtualmachineinstances, virtualmachines]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [""]
  resources: [pods, pods/log, events]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: tenant-vm-author, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: vm-author}
subjects:
- {kind: ServiceAccount, name: tenant, namespace: default}
`

// floodUserData makes the guest a hostile one: once booted it stops its
// agent and writes 60 MiB without a newline on the agent channel.
const floodUserData = `#!/bin/sh
m() { echo "KEMU-GUEST flood $*" >/dev/console; }
port=
for p in /sys/class/virtio-ports/*; do
  [ "$(cat "$p/name")" = org.qemu.guest_agent.0 ] && port=/dev/${p##*/}
done
for d in /proc/[0-9]*; do
  [ "$(cat "$d/comm" 2>/dev/null)" = qemu-ga ] && kill "${d#/proc/}" && ga=$d
done
# The port opens once the agent let go of it (virtio ports are exclusive).
i=0
while [ -n "$ga" ] && [ -d "$ga" ] && [ $i -lt 60 ]; do sleep 1; i=$((i + 1)); done
m status=started port=$port
head -c 62914560 /dev/zero | tr '\000' x >"$port"
m status=done rc=$?
`

// tenantKubectl runs kubectl as the tenant (a token of its ServiceAccount,
// no admin credentials).
func (ev *env) tenantKubectl(t testing.TB) func(stdin string, args ...string) (string, error) {
	t.Helper()
	ev.apply(t, tenantRBAC)
	tok, _, err := ev.c.Kubectl("-n", ns, "create", "token", "tenant", "--duration=30m")
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, ev.c.CACert, 0o600); err != nil {
		t.Fatal(err)
	}
	return func(stdin string, args ...string) (string, error) {
		cmd := append([]string{"--kubeconfig=/dev/null", "--server=" + ev.c.Host, "--certificate-authority=" + ca,
			"--token=" + strings.TrimSpace(tok)}, args...)
		out, stderr, err := ev.c.KubectlInput(stdin, cmd...)
		if err != nil {
			return out, fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, stderr)
		}
		return out, nil
	}
}

// TestHostileTenant acts as a VMI's author who wants the node, and as a
// guest that floods the launcher: nothing may cross into the host.
// (The symlinked launcher socket is nodeagent/vmi's TestLauncherSymlink on
// a real kubelet; the node agent's token against other nodes is
// test/nodeagentpolicy on a real API server.)
func TestHostileTenant(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	tenant := ev.tenantKubectl(t)

	t.Run("the tenant has VMIs, not Pods or the node", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"create", "virtualmachineinstances.kemu.dev"}, "yes"},
			{[]string{"create", "pods"}, "no"},
			{[]string{"create", "pods", "--subresource=exec"}, "no"},
			{[]string{"get", "nodes"}, "no"},
			{[]string{"update", "virtualmachineinstances.kemu.dev", "--subresource=status"}, "no"},
		} {
			out, _ := tenant("", append(append([]string{"auth", "can-i"}, c.args...), "-n", ns)...)
			if strings.TrimSpace(out) != c.want {
				t.Errorf("tenant can-i %v: %q, want %s", c.args, out, c.want)
			}
		}
	})

	hostDiskVMI := func(name, path, typ string) string {
		return fmt.Sprintf(`apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: %s, namespace: %s}
spec:
  domain:
    memory: {guest: 128Mi}
    devices:
      autoattachPodInterface: false
      disks:
      - {name: root, disk: {bus: virtio}}
      - {name: host, disk: {bus: virtio}}
  volumes:
  - {name: root, containerDisk: {image: %s, imagePullPolicy: IfNotPresent}}
  - {name: host, hostDisk: {path: %q, type: %s, capacity: 16Mi}}
`, name, ns, containerDiskImage, path, typ)
	}

	t.Run("hostDisk outside the allowed directory is refused before any Pod", func(t *testing.T) {
		for _, c := range []struct{ name, path string }{
			{"hd-etc", "/etc/shadow"},
			{"hd-dotdot", ev.hostDisks + "/../../etc/shadow"},
			{"hd-dir", "/etc"},
		} {
			// kemu-api's webhook refuses them at apply (it reads
			// kemu-config's hostDiskDirs as the controller does); an
			// object stored without it (kemu-api installed later) is
			// refused by the controller before any Pod. Either way the
			// field is named.
			if out, err := tenant(hostDiskVMI(c.name, c.path, "Disk"), "apply", "-f", "-"); err != nil {
				if !strings.Contains(err.Error(), "spec.volumes[1].hostDisk.path") {
					t.Fatalf("%s: refused without naming the field: %v\n%s", c.path, err, out)
				}
				t.Logf("%s: refused at apply naming spec.volumes[1].hostDisk.path", c.path)
				continue
			}
			t.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vmi", c.name, "--ignore-not-found", "--wait=false") }) //nolint:errcheck // best effort
			var vmi *v1.VirtualMachineInstance
			err := poll(ctx, 300*time.Millisecond, func() error {
				var err error
				if vmi, err = ev.getVMI(ctx, c.name); err != nil || vmi == nil {
					return fmt.Errorf("VMI: %v", err)
				}
				if vmi.Status.Phase != v1.Failed {
					return fmt.Errorf("phase %q", vmi.Status.Phase)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%s: %v", c.path, err)
			}
			cond := condition(vmi, v1.VirtualMachineInstanceSynchronized)
			if cond == nil || !strings.Contains(cond.Message, "spec.volumes[1].hostDisk.path") || !strings.Contains(cond.Message, "hostDiskDirs") {
				t.Errorf("%s: Synchronized %+v, want the field and the config key named", c.path, cond)
			}
			pods, err := ev.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "kemu.dev/created-by=" + string(vmi.UID)})
			if err != nil || len(pods.Items) != 0 {
				t.Errorf("%s: launcher Pods %v (%v), want none", c.path, len(pods.Items), err)
			}
		}
	})

	t.Run("a hostDisk symlinked out of the allowed directory never reaches QEMU", func(t *testing.T) {
		// The decoy stands for a host file (a real tenant would aim at
		// /etc/shadow); the symlink is what someone with write access to
		// the allowed directory could leave there.
		decoy := filepath.Join(ev.c.Dir, "host-secret.img")
		if err := os.WriteFile(decoy, bytes.Repeat([]byte("host secret "), 1<<16), 0o600); err != nil {
			t.Fatal(err)
		}
		evil := filepath.Join(ev.hostDisks, "evil.img")
		if err := os.Symlink(decoy, evil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(evil); os.Remove(decoy) })
		const name = "hd-symlink"
		if _, err := tenant(hostDiskVMI(name, evil, "Disk"), "apply", "-f", "-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vmi", name, "--ignore-not-found", "--timeout=2m") }) //nolint:errcheck // best effort
		// The controller cannot see the node: the Pod is made, the kubelet
		// mounts the link's target, the node agent refuses to start the VM.
		var vmi *v1.VirtualMachineInstance
		err := poll(ctx, 300*time.Millisecond, func() error {
			var err error
			if vmi, err = ev.getVMI(ctx, name); err != nil || vmi == nil {
				return fmt.Errorf("VMI: %v", err)
			}
			c := condition(vmi, v1.VirtualMachineInstanceSynchronized)
			if c == nil || c.Status != corev1.ConditionFalse || !strings.Contains(c.Message, "symlink") {
				return fmt.Errorf("Synchronized %+v (phase %s)", c, vmi.Status.Phase)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		err = poll(ctx, 300*time.Millisecond, func() error {
			evs, err := ev.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
			if err != nil {
				return err
			}
			for _, e := range evs.Items {
				if e.Reason == "HostDiskRefused" && strings.Contains(e.Message, "spec.volumes[1].hostDisk.path") {
					t.Logf("event %s: %s", e.Reason, e.Message)
					return nil
				}
			}
			return fmt.Errorf("no HostDiskRefused event among %d", len(evs.Items))
		})
		if err != nil {
			t.Error(err)
		}
		if p := qemuPids(name); len(p) != 0 {
			t.Errorf("QEMU runs for the refused VMI: %v", p)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(decoy, &st); err != nil || st.Uid != 0 {
			t.Errorf("the host file was touched (owner %d, %v)", st.Uid, err)
		}
	})

	t.Run("allowed hostDisk runs; QEMU unprivileged; own cgroup only; guest flood", func(t *testing.T) {
		const name = "hd-ok"
		disk := filepath.Join(ev.hostDisks, "team-a", "disk.img")
		if err := os.MkdirAll(filepath.Dir(disk), 0o755); err != nil {
			t.Fatal(err)
		}
		m := strings.Replace(hostDiskVMI(name, disk, "DiskOrCreate"), "  - {name: host, hostDisk", `  - name: ci
    cloudInitNoCloud:
      userData: |
`+indent(floodUserData, "        ")+`  - {name: host, hostDisk`, 1)
		m = strings.Replace(m, "      - {name: host, disk: {bus: virtio}}", "      - {name: ci, disk: {bus: virtio}}\n      - {name: host, disk: {bus: virtio}}", 1)
		if _, err := tenant(m, "apply", "-f", "-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vmi", name, "--ignore-not-found", "--timeout=3m") }) //nolint:errcheck // best effort
		vmi := ev.waitRunning(ctx, t, name, bootTimeout)
		if fi, err := os.Stat(disk); err != nil || fi.Size() != 16<<20 {
			t.Errorf("DiskOrCreate made no 16 MiB file at %s: %v", disk, err)
		}

		qpid := qemuPid(ctx, t, name)
		qs, err := unpriv.ReadStatus(qpid)
		if err != nil {
			t.Fatal(err)
		}
		if err := qs.Unprivileged(unpriv.Identity{UID: unpriv.UID, GID: unpriv.GID}); err != nil || qs.CapEff != 0 || qs.CapBnd != 0 {
			t.Errorf("QEMU (pid %d): %v, CapEff %016x CapBnd %016x", qpid, err, qs.CapEff, qs.CapBnd)
		}
		t.Logf("QEMU pid %d: uid %v CapEff %016x CapBnd %016x NoNewPrivs %v Seccomp %d", qpid, qs.UIDs, qs.CapEff, qs.CapBnd, qs.NoNewPrivs, qs.Seccomp)

		pod, err := ev.kube.CoreV1().Pods(ns).Get(ctx, vmi.Status.LauncherPod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		lpid, err := launcherPid(string(pod.UID))
		if err != nil {
			t.Fatal(err)
		}
		// dropcaps.Keep, of those the launcher Pod grants: a VMI without a
		// tap (this one has no interface) gets no NET_ADMIN (controller/template).
		var keep uint64
		for _, c := range dropcaps.Keep {
			if c == cap.NET_ADMIN && !template.NeedsTun(vmi) {
				continue
			}
			keep |= 1 << uint(c)
		}
		if ls, err := unpriv.ReadStatus(lpid); err != nil || ls.CapEff != keep || ls.CapBnd != keep {
			t.Errorf("launcher (pid %d) capabilities %+v (%v), want only %v", lpid, ls, err, dropcaps.Keep)
		}

		// Inside the launcher's container: the cgroup2 mount it made shows its
		// own container's cgroup at the top and nothing of other Pods.
		mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", lpid))
		if err != nil {
			t.Fatal(err)
		}
		own, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", lpid))
		ownPath := strings.TrimSpace(strings.TrimPrefix(lastLine(string(own)), "0::"))
		var cg2 []string
		for _, l := range strings.Split(string(mounts), "\n") {
			if f := strings.Fields(l); len(f) > 9 && strings.Contains(l, " - cgroup2 ") {
				cg2 = append(cg2, f[4])
				if f[3] != ownPath {
					t.Errorf("a cgroup2 mount in the launcher's container shows %s, not its own cgroup %s: %s", f[3], ownPath, l)
				}
			}
		}
		if len(cg2) == 0 {
			t.Fatalf("no cgroup2 mount in the launcher's container:\n%s", mounts)
		}
		var seen []string
		for _, mp := range cg2 {
			root := fmt.Sprintf("/proc/%d/root%s", lpid, mp)
			err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err != nil || !d.IsDir() || p == root {
					return nil
				}
				rel := strings.TrimPrefix(p, root+"/")
				seen = append(seen, rel)
				if !strings.HasPrefix(rel, "kemu-qemu-") {
					t.Errorf("the launcher's container sees cgroup %s beside QEMU's", rel)
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}
		t.Logf("cgroup2 in the launcher's container (%v, own cgroup %s): %v", cg2, ownPath, seen)

		// The guest floods its agent channel; the launcher stays small and
		// the VMI Running while oversize lines are dropped.
		peak := uint64(0)
		dropped := 0
		err = poll(ctx, 2*time.Second, func() error {
			rss, err := vmRSS(lpid)
			if err != nil {
				return err
			}
			peak = max(peak, rss)
			out := ev.run(ctx, t, "shell", name, "-n", ns, "-c", "stats")
			if i := strings.Index(out, "oversize lines dropped"); i > 0 {
				f := strings.Fields(out[strings.LastIndex(out[:i], ":")+1 : i])
				if len(f) > 0 {
					dropped, _ = strconv.Atoi(f[0])
				}
			}
			if dropped < 5 {
				return fmt.Errorf("%d oversize agent lines dropped so far (launcher RSS %d KiB)", dropped, rss>>10)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 10; i++ { // a few more samples while the guest keeps writing
			if rss, err := vmRSS(lpid); err == nil {
				peak = max(peak, rss)
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Logf("launcher RSS peak %.1f MiB with %d oversize agent lines (1 MiB each) dropped", float64(peak)/(1<<20), dropped)
		if peak >= 32<<20 {
			t.Errorf("launcher RSS peaked at %.1f MiB under the guest's flood, want < 32 MiB", float64(peak)/(1<<20))
		}
		if v, err := ev.getVMI(ctx, name); err != nil || v.Status.Phase != v1.Running {
			t.Errorf("VMI after the flood: %v %v", v.Status.Phase, err)
		}
	})
}

// vmRSS is a process's VmRSS in bytes.
func vmRSS(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
