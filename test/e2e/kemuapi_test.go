//go:build cluster && qemu

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kemu-dev/kemu/api/subresources"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/apiserver/admission/admissiontest"
)

// consoleShellUserData starts a shell on the serial console, so that a
// command typed into kemuctl console runs in the guest. (Its marker is
// printed at boot, before any console connects: the console does not
// replay output, so tests type a command until its output shows.)
const consoleShellUserData = "#!/bin/sh\n" + consoleShell

// consoleShell is consoleShellUserData's script without its first line,
// to append to another script.
const consoleShell = `setsid sh -c 'exec /bin/sh -i </dev/console >/dev/console 2>&1' &
echo "KEMU-GUEST console-shell" >/dev/console
`

// webShellUserData is webUserData plus the console shell.
const webShellUserData = webUserData + consoleShell

// user is a namespace user: a ServiceAccount of ns bound to one ClusterRole
// by a RoleBinding, with its token as kubectl's and kemuctl's connection
// flags (no admin credentials).
type user struct {
	name  string
	flags []string
}

func (ev *env) user(t testing.TB, name, clusterRole string) user {
	t.Helper()
	ev.apply(t, fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata: {name: %[1]s, namespace: %[2]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: %[1]s, namespace: %[2]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %[3]q}
subjects:
- {kind: ServiceAccount, name: %[1]s, namespace: %[2]s}
`, name, ns, clusterRole))
	tok := ev.kubectl(t, "-n", ns, "create", "token", name, "--duration=1h")
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, ev.c.CACert, 0o600); err != nil {
		t.Fatal(err)
	}
	return user{name: name, flags: []string{"--kubeconfig=/dev/null", "--server=" + ev.c.Host,
		"--certificate-authority=" + ca, "--token=" + strings.TrimSpace(tok), "-n", ns}}
}

// kubectl runs kubectl as u.
func (u user) kubectl(ev *env, stdin string, args ...string) (string, error) {
	out, stderr, err := ev.c.KubectlInput(stdin, append(append([]string{}, u.flags...), args...)...)
	if err != nil {
		return out + stderr, fmt.Errorf("kubectl %s as %s: %v: %s", strings.Join(args, " "), u.name, err, stderr)
	}
	return out, nil
}

// kemuctl runs kemuctl as u; it returns stdout+stderr and the error.
func (u user) kemuctl(ctx context.Context, ev *env, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, ev.kemuctl, append(append([]string{}, args...), u.flags...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestKemuAPI is issue 18's proof on the real cluster with kemu installed
// by kubectl apply -k deploy/: a namespace user bound to kemu.dev:edit
// only (never pods/exec) gets admission errors with their field paths and
// stored defaults, a console that runs a command, a VNC screenshot,
// pause/unpause/soft-reboot and VM stop/start, all through kemu-api's
// subresources; a kemu.dev:view user is refused console, vnc and pause
// with 403; kemu-api restarted during an open console ends the stream with
// a clear message and a new one works.
func TestKemuAPI(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	editor := ev.user(t, "vm-editor", "kemu.dev:edit")
	viewer := ev.user(t, "vm-viewer", "kemu.dev:view")

	t.Run("roles", func(t *testing.T) {
		for _, c := range []struct {
			u    user
			args []string
			want string
		}{
			{editor, []string{"create", "virtualmachineinstances.kemu.dev"}, "yes"},
			{editor, []string{"get", "virtualmachineinstances.subresources.kemu.dev", "--subresource=console"}, "yes"},
			{editor, []string{"update", "virtualmachineinstances.subresources.kemu.dev", "--subresource=pause"}, "yes"},
			{editor, []string{"update", "virtualmachines.subresources.kemu.dev", "--subresource=start"}, "yes"},
			{editor, []string{"create", "pods", "--subresource=exec"}, "no"},
			{editor, []string{"update", "virtualmachineinstances.kemu.dev", "--subresource=status"}, "no"},
			{editor, []string{"update", "virtualmachines.kemu.dev", "--subresource=status"}, "no"},
			{viewer, []string{"get", "virtualmachineinstances.kemu.dev"}, "yes"},
			{viewer, []string{"get", "virtualmachineinstances.subresources.kemu.dev", "--subresource=guestosinfo"}, "yes"},
			{viewer, []string{"get", "virtualmachineinstances.subresources.kemu.dev", "--subresource=console"}, "no"},
			{viewer, []string{"get", "virtualmachineinstances.subresources.kemu.dev", "--subresource=vnc"}, "no"},
			{viewer, []string{"update", "virtualmachineinstances.subresources.kemu.dev", "--subresource=pause"}, "no"},
			{viewer, []string{"create", "virtualmachineinstances.kemu.dev"}, "no"},
		} {
			out, _ := c.u.kubectl(ev, "", append([]string{"auth", "can-i"}, c.args...)...)
			if strings.TrimSpace(out) != c.want {
				t.Errorf("%s can-i %v: %q, want %s", c.u.name, c.args, strings.TrimSpace(out), c.want)
			}
		}
		// kemu's roles are aggregated into Kubernetes' own.
		for _, role := range []string{"admin", "edit", "view"} {
			err := poll(ctx, 500*time.Millisecond, func() error {
				out := ev.kubectl(t, "get", "clusterrole", role, "-o", "json")
				if !strings.Contains(out, subresources.Group) {
					return fmt.Errorf("ClusterRole %s has no %s rule yet", role, subresources.Group)
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}
	})

	t.Run("admission refuses with field paths", func(t *testing.T) {
		for _, bad := range admissiontest.BadVMIs {
			doc := fmt.Sprintf("apiVersion: kemu.dev/v1alpha1\nkind: VirtualMachineInstance\nmetadata: {name: bad, namespace: %s}\nspec:%s\n", ns, bad.Spec)
			for _, dry := range [][]string{nil, {"--dry-run=server"}} {
				out, err := editor.kubectl(ev, doc, append([]string{"apply", "-f", "-"}, dry...)...)
				if err == nil {
					t.Errorf("%s %v: accepted:\n%s", bad.Name, dry, out)
					continue
				}
				for _, p := range bad.Paths {
					if !strings.Contains(err.Error(), p) {
						t.Errorf("%s %v: %s not named in\n%v", bad.Name, dry, p, err)
					}
				}
			}
		}
	})

	const name = "apivm"
	t.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vm", name, "--ignore-not-found", "--timeout=3m") }) //nolint:errcheck // best effort
	manifest := vmiManifest(vmiOptions{kind: "VirtualMachine", name: name, userData: consoleShellUserData, labels: map[string]string{"kemu-e2e": name}})
	if out, err := editor.kubectl(ev, manifest, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	ev.waitRunning(ctx, t, name, bootTimeout)
	ev.waitCondition(ctx, t, name, v1.VirtualMachineInstanceAgentConnected, corev1.ConditionTrue, bootTimeout)

	t.Run("defaults are stored", func(t *testing.T) {
		out, err := editor.kubectl(ev, "", "get", "vmi", name, "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var vmi v1.VirtualMachineInstance
		if err := json.Unmarshal([]byte(out), &vmi); err != nil {
			t.Fatal(err)
		}
		d := vmi.Spec.Domain
		if d.Machine == nil || d.Machine.Type == "" || d.Firmware == nil || d.Firmware.UUID == "" {
			t.Errorf("kubectl get vmi shows no stored defaults: machine %+v firmware %+v", d.Machine, d.Firmware)
		}
	})

	t.Run("console runs a command", func(t *testing.T) {
		con := ev.startConsoleAs(t, name, editor)
		if err := con.runInShell(ctx, "echo kemu-$((6*7))-done", "kemu-42-done", 3*time.Minute); err != nil {
			t.Fatal(err)
		}
		con.stop()
	})

	t.Run("vnc screenshot", func(t *testing.T) {
		shot := filepath.Join(t.TempDir(), "shot.png")
		if out, err := editor.kemuctl(ctx, ev, "vnc", "screenshot", name, "-o", shot); err != nil {
			t.Fatalf("kemuctl vnc screenshot: %v\n%s", err, out)
		}
		f, err := os.Open(shot)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		img, err := png.Decode(f)
		if err != nil {
			t.Fatalf("screenshot is no PNG: %v", err)
		}
		if blank(img) {
			t.Errorf("screenshot %v is one colour", img.Bounds())
		}
		t.Logf("screenshot %v", img.Bounds())
	})

	t.Run("guest reports", func(t *testing.T) {
		out, err := viewer.kubectl(ev, "", "get", "--raw", subresources.GuestOSInfoVerb.Path(ns, name))
		if err != nil {
			t.Fatal(err)
		}
		var info subresources.GuestAgentInfo
		if err := json.Unmarshal([]byte(out), &info); err != nil || info.OS.ID == "" {
			t.Fatalf("guestosinfo: %v %s", err, out)
		}
		t.Logf("guestosinfo as the viewer: %s %s", info.OS.ID, info.OS.KernelRelease)
	})

	t.Run("the viewer may not", func(t *testing.T) {
		for _, args := range [][]string{
			{"console", name},
			{"vnc", "screenshot", name, "-o", filepath.Join(t.TempDir(), "x.png")},
			{"pause", name},
		} {
			cctx, ccancel := context.WithTimeout(ctx, time.Minute)
			out, err := viewer.kemuctl(cctx, ev, args...)
			ccancel()
			if err == nil || !strings.Contains(strings.ToLower(out), "forbidden") {
				t.Errorf("kemuctl %v as the viewer: %v, want forbidden:\n%s", args, err, out)
			}
		}
	})

	t.Run("pause unpause soft-reboot", func(t *testing.T) {
		for _, verb := range []string{"pause", "unpause", "soft-reboot"} {
			if out, err := editor.kemuctl(ctx, ev, verb, name); err != nil {
				t.Fatalf("kemuctl %s: %v\n%s", verb, err, out)
			} else {
				t.Logf("kemuctl %s: %s", verb, strings.TrimSpace(out))
			}
		}
	})

	t.Run("kemu-api restarted during a console", func(t *testing.T) {
		con := ev.startConsoleAs(t, name, editor)
		if err := con.waitFor(ctx, "KEMU-GUEST tick", 3*time.Minute); err != nil {
			t.Fatal(err)
		}
		ev.kubectl(t, "-n", kemuNS, "rollout", "restart", "deployment/kemu-api")
		ev.kubectl(t, "-n", kemuNS, "rollout", "status", "deployment/kemu-api", "--timeout=3m")
		select {
		case err := <-con.done:
			con.done <- err
			t.Logf("console ended (%v): %s", err, tail(con.out.String(), 300))
		case <-time.After(time.Minute):
			t.Fatalf("kemuctl console still runs after kemu-api restarted:\n%s", tail(con.out.String(), 1000))
		}
		if out := con.out.String(); !strings.Contains(out, "kemu-api is shutting down") {
			t.Errorf("the console's end does not say why:\n%s", tail(out, 1000))
		}
		if err := ev.waitKemuAPI(ctx); err != nil {
			t.Fatal(err)
		}
		again := ev.startConsoleAs(t, name, editor)
		if err := again.waitFor(ctx, "KEMU-GUEST tick", time.Minute); err != nil {
			t.Fatal(err)
		}
		again.stop()
	})

	t.Run("VM stop and start", func(t *testing.T) {
		vmi, err := ev.getVMI(ctx, name)
		if err != nil || vmi == nil {
			t.Fatalf("VMI: %v", err)
		}
		if out, err := editor.kemuctl(ctx, ev, "stop", name); err != nil {
			t.Fatalf("kemuctl stop: %v\n%s", err, out)
		}
		err = poll(ctx, time.Second, func() error {
			cur, err := ev.getVMI(ctx, name)
			if err != nil {
				return err
			}
			if cur != nil && cur.UID == vmi.UID {
				return fmt.Errorf("VMI %s still there (phase %s)", name, cur.Status.Phase)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if out, err := editor.kemuctl(ctx, ev, "start", name); err != nil {
			t.Fatalf("kemuctl start: %v\n%s", err, out)
		}
		started := ev.waitRunning(ctx, t, name, bootTimeout)
		if started.UID == vmi.UID {
			t.Errorf("start left the old VMI")
		}
		vm, err := ev.kemu.KemuV1alpha1().VirtualMachines(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if vm.Spec.RunStrategy == nil || *vm.Spec.RunStrategy != v1.RunStrategyAlways {
			t.Errorf("after start: runStrategy %v", vm.Spec.RunStrategy)
		}
	})
}

// blank says whether every pixel of img has the same colour.
func blank(img image.Image) bool {
	b := img.Bounds()
	first := img.At(b.Min.X, b.Min.Y)
	r0, g0, b0, _ := first.RGBA()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bb, _ := img.At(x, y).RGBA()
			if r != r0 || g != g0 || bb != b0 {
				return false
			}
		}
	}
	return true
}

// kemuAPIElsewhere makes sure a ready kemu-api replica runs on a node other
// than node, before a test stops node: with both replicas there, kemu-api
// (its webhooks, its subresources) would be down with it. Deleting one of
// the replicas on node lets the scheduler place the new one away from the
// other (the Deployment's preferred anti-affinity).
func (ev *env) kemuAPIElsewhere(ctx context.Context, t testing.TB, node string) {
	t.Helper()
	elsewhere := func() (int, []corev1.Pod, error) {
		pods, err := ev.kube.CoreV1().Pods(kemuNS).List(ctx, metav1.ListOptions{LabelSelector: kemuAPISelector})
		if err != nil {
			return 0, nil, err
		}
		n, on := 0, []corev1.Pod(nil)
		for _, p := range pods.Items {
			switch {
			case p.Spec.NodeName == node:
				on = append(on, p)
			case p.DeletionTimestamp == nil && podReady(&p):
				n++
			}
		}
		return n, on, nil
	}
	n, on, err := elsewhere()
	if err != nil {
		t.Fatal(err)
	}
	if n > 0 {
		return
	}
	if len(on) == 0 {
		t.Fatalf("no kemu-api replica anywhere")
	}
	ev.kubectl(t, "-n", kemuNS, "delete", "pod", on[0].Name, "--wait=false")
	err = poll(ctx, 500*time.Millisecond, func() error {
		n, _, err := elsewhere()
		if err == nil && n == 0 {
			err = fmt.Errorf("no ready kemu-api replica off node %s yet", node)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("moved a kemu-api replica off node %s", node)
}

// kemuAPIEndpointsOff waits until kemu-api's Service no longer sends
// requests to a replica on node (a stopped node's Pods go unready once the
// node controller sees the node gone) and one elsewhere is ready.
func (ev *env) kemuAPIEndpointsOff(ctx context.Context, node string) error {
	return poll(ctx, 500*time.Millisecond, func() error {
		slices, err := ev.kube.DiscoveryV1().EndpointSlices(kemuNS).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kemu-api"})
		if err != nil {
			return err
		}
		ready := 0
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				isReady := e.Conditions.Ready == nil || *e.Conditions.Ready
				if e.NodeName != nil && *e.NodeName == node && isReady {
					return fmt.Errorf("kemu-api's endpoint %v on node %s is still ready", e.Addresses, node)
				}
				if isReady {
					ready++
				}
			}
		}
		if ready == 0 {
			return fmt.Errorf("kemu-api has no ready endpoint")
		}
		return nil
	})
}

const kemuAPISelector = "app.kubernetes.io/name=kemu-api"

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
