//go:build qemu

package launcher

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kemu-dev/kemu/launcher/cmdline"
	"github.com/kemu-dev/kemu/launcher/unpriv"
	"github.com/kemu-dev/kemu/test/testguest"
)

// virtiofsVMI boots the test guest's kernel with the filesystems FS (a
// list of "- {name: …, virtiofs: {}}") over VOLUMES, telling the guest
// their tags (TAGS) and to report changed shares every 2 s.
const virtiofsVMI = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: vfs}
spec:
  domain:
    memory: {guest: 256Mi}
    firmware:
      kernelBoot:
        kernelArgs: console=ttyS0 quiet kemu.dhcp=0 kemu.virtiofs=TAGS kemu.fsrescan=2
        container: {image: "oci:_out/testguest/oci/kernelboot", kernelPath: /boot/vmlinuz, initrdPath: /boot/initrd.img}
    devices:
      autoattachPodInterface: false
      filesystems:
FS
  volumes:
VOLUMES
`

func virtiofsVMIWith(tags []string, volumes ...string) string {
	var fs []string
	for _, t := range tags {
		fs = append(fs, "      - {name: "+t+", virtiofs: {}}")
	}
	return strings.NewReplacer("TAGS", strings.Join(tags, ","), "FS\n", strings.Join(fs, "\n")+"\n",
		"VOLUMES\n", strings.Join(volumes, "\n")+"\n").Replace(virtiofsVMI)
}

// claimDir makes <root>/<claim> with files, writable by QEMU's user (as a
// claim mounted with its fsGroup).
func claimDir(t *testing.T, root, claim string, files map[string]string) {
	t.Helper()
	dir := filepath.Join(root, claim)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range files {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(dir, unpriv.UID, unpriv.GID); err != nil {
		t.Fatal(err)
	}
}

// readOnlyMount bind-mounts src at dst read-only, as the kubelet mounts a
// config volume into the launcher Pod; src stays writable (the kubelet's
// side, where it swaps ..data).
func readOnlyMount(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dst, unix.MNT_DETACH); err != nil {
			t.Error(err)
		}
	})
	if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
}

// swapData updates a kubeletMount'ed volume as the kubelet does: the new
// content in a new timestamped directory, a new symlink renamed over
// ..data, the old directory removed.
func swapData(t *testing.T, dir, stamp string, keys map[string]string) {
	t.Helper()
	old, err := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, stamp)
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range keys {
		if err := os.WriteFile(filepath.Join(data, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(stamp, filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
		t.Fatal(err)
	}
}

// fsFile waits for the guest's report of path in share tag, from a scan
// after seq, and returns its content.
func (v *vm) fsFile(seq int, tag, path string) (testguest.Marker, string) {
	v.t.Helper()
	m := v.waitAfter(bootTimeout, seq, testguest.IsKind(testguest.KindFSFile, "tag", tag, "path", path))
	b, err := base64.StdEncoding.DecodeString(m.Field("b64"))
	if err != nil {
		v.t.Fatalf("%s: %v", m.Raw, err)
	}
	return m, string(b)
}

// virtiofsdPIDs are the virtiofsd processes l started, by filesystem.
func virtiofsdPIDs(l *Launcher) map[string]int {
	pids := map[string]int{}
	for _, d := range l.fs {
		if d.cmd != nil {
			pids[d.share.Name] = d.cmd.Process.Pid
		}
	}
	return pids
}

// assertNothingLeft checks that nothing is left of a VM: no virtiofsd, no socket, no
// runtime directory.
func assertNothingLeft(t *testing.T, dir string, pids map[string]int) {
	t.Helper()
	for name, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("virtiofsd of %s (pid %d) still exists (%v)", name, pid, err)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("runtime directory %s left behind (%v)", dir, err)
	}
}

// A file-system claim and a configMap reach the guest through virtiofs:
// it lists and reads them, sees the configMap's update (the kubelet's
// ..data swap) within its rescan, writes into the claim (not into the
// read-only configMap); each virtiofsd is QEMU's user with no_new_privs to
// the node, in QEMU's device cgroup; nothing is left once the VM stopped.
func TestVirtiofsShares(t *testing.T) {
	base := shortDir(t)
	// A containerPath: a read-only mount of the launcher's container (as a
	// token projection another webhook adds), outside the reserved trees
	// (/tmp is one).
	tokenMount, err := os.MkdirTemp("/run", "kemu-cp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tokenMount) })
	tokenSrc := filepath.Join(base, "token-src")
	if err := os.MkdirAll(tokenSrc, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tokenSrc, "token"), []byte("eyJ.projected.token"), 0o644); err != nil {
		t.Fatal(err)
	}
	readOnlyMount(t, tokenSrc, tokenMount)
	cfg := newConfig(t, parseVMI(t, virtiofsVMIWith([]string{"data", "cm", "token"},
		"  - {name: data, persistentVolumeClaim: {claimName: data}}",
		"  - {name: cm, configMap: {name: app}}",
		"  - {name: token, containerPath: {path: "+tokenMount+"}}")))
	cfg.PVCRoot = filepath.Join(base, "pvc")
	claimDir(t, cfg.PVCRoot, "data", map[string]string{"hello.txt": "hello from the claim\n"})
	kubelet := filepath.Join(base, "kubelet", "cm")
	kubeletMount(t, kubelet, map[string]string{"color": "blue\n", "size": "L\n"})
	cfg.ConfigDir = filepath.Join(base, "config")
	readOnlyMount(t, kubelet, filepath.Join(cfg.ConfigDir, "cm"))

	t0 := time.Now()
	v := start(t, cfg)
	for _, tag := range []string{"data", "cm", "token"} {
		m := v.wait(bootTimeout, testguest.IsKind(testguest.KindFS, "tag", tag, "scan", "0"))
		if m.Field("status") != "mounted" {
			t.Fatalf("%s: %s", tag, m.Raw)
		}
	}
	if _, got := v.fsFile(0, "data", "hello.txt"); got != "hello from the claim\n" {
		t.Errorf("data/hello.txt = %q", got)
	}
	for k, want := range map[string]string{"color": "blue\n", "size": "L\n"} {
		if _, got := v.fsFile(0, "cm", k); got != want {
			t.Errorf("cm/%s = %q, want %q", k, got, want)
		}
	}
	if _, got := v.fsFile(0, "token", "token"); got != "eyJ.projected.token" {
		t.Errorf("token/token = %q (the containerPath)", got)
	}
	ready := v.wait(bootTimeout, testguest.IsKind(testguest.KindReady))
	t.Logf("boot to ready with 3 virtiofs shares: %s (phases %v)", time.Since(t0).Round(time.Millisecond), v.l.Phases)

	// To the node, every virtiofsd is QEMU's user, nothing more.
	pids := virtiofsdPIDs(v.l)
	if len(pids) != 3 {
		t.Fatalf("virtiofsd pids %v", pids)
	}
	cg := v.l.DeviceCgroup()
	for name, pid := range pids {
		st, err := unpriv.ReadStatus(pid)
		if err != nil {
			t.Fatal(err)
		}
		if st.UIDs != [4]int{unpriv.UID, unpriv.UID, unpriv.UID, unpriv.UID} || st.GIDs != [4]int{unpriv.GID, unpriv.GID, unpriv.GID, unpriv.GID} || !st.NoNewPrivs {
			t.Errorf("virtiofsd %s: uids %v gids %v no_new_privs %v", name, st.UIDs, st.GIDs, st.NoNewPrivs)
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err != nil || !strings.Contains(string(b), "/"+filepath.Base(cg)+"\n") {
			t.Errorf("virtiofsd %s: /proc/pid/cgroup %q, not %s (%v)", name, b, cg, err)
		}
		t.Logf("virtiofsd %s: pid %d VmRSS %d KiB", name, pid, processRSS(t, pid))
	}
	if st, err := os.Stat(cmdline.FilesystemSocket(cfg.Dir, "data")); err != nil || st.Mode()&os.ModeSocket == 0 {
		t.Errorf("socket: %v %v", st, err)
	}

	// The kubelet updates the configMap; the guest sees it.
	swapData(t, kubelet, "..2026_11_28_02_00_00.000000002", map[string]string{"color": "green\n"})
	m, got := v.fsFile(ready.Seq, "cm", "color")
	if got != "green\n" {
		t.Errorf("after the update, cm/color = %q (%s)", got, m.Raw)
	}
	fs := v.waitAfter(bootTimeout, ready.Seq, testguest.IsKind(testguest.KindFS, "tag", "cm", "scan", m.Field("scan")))
	if fs.Field("files") != "color" {
		t.Errorf("after the update, cm has %q, want color only", fs.Field("files"))
	}

	// The guest writes into the claim (as QEMU's user on the node), not
	// into the configMap.
	ctx := ctxFor(t, 3*time.Minute)
	pollPing(t, ctx, v.l, bootTimeout, "after boot")
	var out, errOut bytes.Buffer
	r, err := v.l.Exec(ctx, "echo written by the guest > /run/kemu/fs/data/guest.txt && sync", &out, &errOut)
	if err != nil || !r.OK() {
		t.Fatalf("writing into the claim: %+v %v %s", r, err, errOut.String())
	}
	p := filepath.Join(cfg.PVCRoot, "data", "guest.txt")
	if b, err := os.ReadFile(p); err != nil || string(b) != "written by the guest\n" {
		t.Errorf("%s: %q %v", p, b, err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Sys().(*syscall.Stat_t).Uid != unpriv.UID {
		t.Errorf("%s is not QEMU's user's: %v", p, err)
	}
	errOut.Reset()
	r, err = v.l.Exec(ctx, "echo x > /run/kemu/fs/cm/new", &out, &errOut)
	if err != nil || r.OK() || !strings.Contains(errOut.String(), "Read-only file system") {
		t.Errorf("writing into the configMap: %+v %v %q", r, err, errOut.String())
	}

	kctx := ctxFor(t, stepTimeout)
	if _, err := v.l.Kill(kctx); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, cfg.Dir, pids)
}

// vmRSS is a process's resident set, KiB.
func processRSS(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no VmRSS for %d", pid)
	return 0
}

// A virtiofsd that dies while the VM runs ends the VM: QEMU is stopped,
// the reason names the filesystem; nothing is left. Also the boot time to
// ready without a share and with one, for docs/launcher.md.
func TestVirtiofsdDeathEndsVM(t *testing.T) {
	plain := parseVMI(t, strings.NewReplacer(" kemu.virtiofs=TAGS", "", "      filesystems:\nFS\n", "", "  volumes:\nVOLUMES\n", "").Replace(virtiofsVMI))
	t0 := time.Now()
	v0 := start(t, newConfig(t, plain))
	v0.wait(bootTimeout, testguest.IsKind(testguest.KindReady))
	t.Logf("boot to ready without a share: %s", time.Since(t0).Round(time.Millisecond))
	if _, err := v0.l.Kill(ctxFor(t, stepTimeout)); err != nil {
		t.Fatal(err)
	}

	cfg := newConfig(t, parseVMI(t, virtiofsVMIWith([]string{"data"}, "  - {name: data, persistentVolumeClaim: {claimName: data}}")))
	cfg.PVCRoot = filepath.Join(shortDir(t), "pvc")
	claimDir(t, cfg.PVCRoot, "data", map[string]string{"a": "b"})
	t0 = time.Now()
	v := start(t, cfg)
	v.wait(bootTimeout, testguest.IsKind(testguest.KindReady))
	t.Logf("boot to ready with one virtiofs share: %s", time.Since(t0).Round(time.Millisecond))
	pids := virtiofsdPIDs(v.l)
	if err := syscall.Kill(pids["data"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d, err := v.l.Wait(ctxFor(t, stepTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if d.State != StateShutoff || d.Reason != ReasonCrashed || !strings.Contains(d.Message, "filesystem data: virtiofsd ended (signal: killed); QEMU was stopped") {
		t.Errorf("domain %s: %s", d, d.Message)
	}
	assertNothingLeft(t, cfg.Dir, pids)
}

// Bad input and a virtiofsd that cannot serve leave nothing: a filesystem
// on a missing claim is refused naming the field before anything runs; a
// virtiofsd that exits at once (here /bin/false) fails the start with its
// reason, QEMU stopped, no process, socket or directory left.
func TestVirtiofsStartFailuresLeaveNothing(t *testing.T) {
	vmi := parseVMI(t, virtiofsVMIWith([]string{"data"}, "  - {name: data, persistentVolumeClaim: {claimName: data}}"))
	for _, tc := range []struct {
		name      string
		setup     func(*Config)
		wantInErr string
	}{
		{"missing claim directory", func(c *Config) { c.PVCRoot = filepath.Join(shortDir(t), "pvc") },
			"spec.volumes[0].persistentVolumeClaim.claimName: claim \"data\" not found"},
		{"virtiofsd exits at once", func(c *Config) {
			c.PVCRoot = filepath.Join(shortDir(t), "pvc")
			claimDir(t, c.PVCRoot, "data", nil)
			c.Virtiofsd = "/bin/false"
		}, "filesystem data: virtiofsd ended (exit status 1); QEMU was stopped"},
		{"no virtiofsd binary", func(c *Config) {
			c.PVCRoot = filepath.Join(shortDir(t), "pvc")
			claimDir(t, c.PVCRoot, "data", nil)
			c.Virtiofsd = "/nonexistent/virtiofsd"
		}, "filesystem data (spec.volumes[0].persistentVolumeClaim.claimName): starting /nonexistent/virtiofsd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := newConfig(t, vmi)
			tc.setup(&cfg)
			l, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
			defer cancel()
			err = l.Start(ctx)
			if err == nil || !strings.Contains(err.Error(), tc.wantInErr) {
				t.Fatalf("start: %v, want %q", err, tc.wantInErr)
			}
			if d := l.Domain(); d.State != StateShutoff || d.Reason != ReasonFailedToStart {
				t.Errorf("domain %s", d)
			}
			assertNothingLeft(t, cfg.Dir, virtiofsdPIDs(l))
			if l.cmd != nil {
				if err := syscall.Kill(l.cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
					t.Errorf("QEMU (pid %d) still exists (%v)", l.cmd.Process.Pid, err)
				}
			}
		})
	}
}
