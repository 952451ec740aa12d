//go:build qemu

package launcher

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/api/manifest"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/devices/kvm"
	"github.com/kemu-dev/kemu/launcher/unpriv"
	"github.com/kemu-dev/kemu/test/testguest"
)

const (
	bootTimeout = 120 * time.Second // TCG, up to two guests at once on 2 cores
	stepTimeout = 60 * time.Second
)

func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := testguest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testguest.Paths(); err != nil {
		t.Fatal(err)
	}
	return root
}

func parseVMI(t testing.TB, yaml string) *v1.VirtualMachineInstance {
	t.Helper()
	docs, err := manifest.Read(strings.NewReader(yaml))
	if err != nil || len(docs) != 1 {
		t.Fatalf("manifest: %v (%d docs)", err, len(docs))
	}
	if len(docs[0].Errors) > 0 {
		t.Fatalf("manifest: %v", docs[0].Errors)
	}
	vmi := docs[0].Object.(*v1.VirtualMachineInstance)
	vmi.Namespace = "test"
	return vmi
}

// vm is a running launcher with its console watched.
type vm struct {
	t   testing.TB
	l   *Launcher
	dir string
	w   *testguest.Watcher
}

func shortDir(t testing.TB) string { return testguest.TempDir(t, "kemu-l-") }

func newConfig(t testing.TB, vmi *v1.VirtualMachineInstance) Config {
	root := repoRoot(t)
	base := shortDir(t)
	return Config{VMI: vmi, Dir: filepath.Join(base, "run"), ImageCache: filepath.Join(base, "cache"),
		BaseDir: root, Accel: "tcg"}
}

func start(t testing.TB, cfg Config) *vm {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	if err := l.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		kctx, kcancel := context.WithTimeout(context.Background(), stepTimeout)
		defer kcancel()
		if _, err := l.Kill(kctx); err != nil {
			t.Errorf("kill: %v", err)
		}
		if t.Failed() {
			t.Logf("QEMU: %s\nstderr: %s", strings.Join(l.Argv(), " "), l.stderr.String())
		}
		if _, err := os.Stat(cfg.Dir); !os.IsNotExist(err) {
			t.Errorf("runtime dir %s left behind (%v)", cfg.Dir, err)
		}
	})
	v := &vm{t: t, l: l, dir: cfg.Dir}
	out, _, detach, err := l.Console()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(detach)
	v.w = testguest.NewChanWatcher(out)
	return v
}

func (v *vm) wait(d time.Duration, p testguest.Predicate) testguest.Marker {
	v.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	m, err := v.w.Wait(ctx, p)
	if err != nil {
		v.t.Fatal(err)
	}
	return m
}

func (v *vm) waitAfter(d time.Duration, seq int, p testguest.Predicate) testguest.Marker {
	v.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	m, err := v.w.WaitAfter(ctx, seq, p)
	if err != nil {
		v.t.Fatal(err)
	}
	return m
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

const diskVMI = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: disk}
spec:
  terminationGracePeriodSeconds: 60
  domain:
    memory: {guest: 256Mi}
    devices:
      autoattachPodInterface: false
      rng: {}
      disks:
      - {name: root, bootOrder: 1, serial: kemu-root, disk: {bus: virtio}}
      - {name: ci, disk: {bus: virtio}}
      - {name: scratch, serial: scratch-1, disk: {bus: scsi}}
      - {name: host, serial: host-1, disk: {bus: sata}}
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
  - name: ci
    cloudInitNoCloud:
      userData: |
        #cloud-config
        kemu-test: launcher
  - {name: scratch, emptyDisk: {capacity: 64Mi}}
  - {name: host, hostDisk: {path: HOSTDISK, type: DiskOrCreate, capacity: 32Mi}}
`

// A containerDisk boot with cloud-init, an emptyDisk on scsi and a hostDisk
// on sata: the guest sees each with its size and serial; pause stops its
// ticks and unpause resumes them; the guest agent answers; ACPI shutdown
// ends it within the grace period with reason GuestShutdown and nothing left.
func TestDiskBootDevicesPauseAgentShutdown(t *testing.T) {
	hostDisk := filepath.Join(shortDir(t), "sub", "host.img")
	vmi := parseVMI(t, strings.Replace(diskVMI, "HOSTDISK", hostDisk, 1))
	cfg := newConfig(t, vmi)
	v := start(t, cfg)

	ready := v.wait(bootTimeout, testguest.IsKind(testguest.KindReady))
	// QEMU runs (and booted) inside its device cgroup.
	cg := v.l.DeviceCgroup()
	if cg == "" {
		t.Fatal("QEMU has no device cgroup")
	}
	if d := v.l.Domain(); d.DeviceCgroup != cg || d.SELinuxContext != "" {
		t.Errorf("domain reports device cgroup %q (want %s), SELinux context %q (SELinux is off here)", d.DeviceCgroup, cg, d.SELinuxContext)
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", v.l.Domain().PID)); err != nil || !strings.Contains(string(b), "/"+filepath.Base(cg)+"\n") {
		t.Errorf("QEMU's /proc/pid/cgroup %q does not name %s (%v)", b, cg, err)
	}
	// QEMU runs as 107:107 with no capabilities, no_new_privs and its
	// seccomp sandbox; the disks it writes are its own (the hostDisk too).
	st, err := unpriv.ReadStatus(v.l.Domain().PID)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Unprivileged(unpriv.Identity{UID: unpriv.UID, GID: unpriv.GID}); err != nil {
		t.Error("QEMU:", err)
	}
	if st.CapBnd != 0 || st.Seccomp != 2 {
		t.Errorf("QEMU: CapBnd %x (want 0), Seccomp %d (want 2, filter)", st.CapBnd, st.Seccomp)
	}
	if fi, err := os.Stat(hostDisk); err != nil || fi.Sys().(*syscall.Stat_t).Uid != unpriv.UID {
		t.Errorf("hostDisk not QEMU's: %v %v", fi, err)
	}
	blocks := map[string]testguest.Marker{}
	for _, m := range v.w.Find(testguest.IsKind(testguest.KindBlock)) {
		blocks[m.Fields["serial"]] = m
	}
	for serial, want := range map[string]struct{ bus, size string }{
		"kemu-root": {"virtio", strconv.Itoa(68157440)},
		"scratch-1": {"scsi", strconv.Itoa(64 << 20)},
		"host-1":    {"sata", strconv.Itoa(32 << 20)},
	} {
		m, ok := blocks[serial]
		if !ok {
			t.Errorf("guest does not see the disk with serial %s; it saw %v", serial, v.w.Find(testguest.IsKind(testguest.KindBlock)))
			continue
		}
		if m.Fields["bus"] != want.bus || m.Fields["size"] != want.size {
			t.Errorf("disk %s: bus %s size %s, want %s %s", serial, m.Fields["bus"], m.Fields["size"], want.bus, want.size)
		}
	}
	ud := v.w.Find(testguest.IsKind(testguest.KindUserData))
	if len(ud) == 0 || !strings.Contains(ud[0].Fields["first"], "cloud-config") {
		t.Errorf("cloud-init user-data not seen: %v", ud)
	}
	if st, err := os.Stat(hostDisk); err != nil || st.Size() != 32<<20 {
		t.Errorf("hostDisk: %v", err)
	}

	// Pause: the tick counter stops; unpause: it goes on.
	tick := v.waitAfter(stepTimeout, ready.Seq, testguest.IsKind(testguest.KindTick))
	ctx := ctxFor(t, stepTimeout)
	if err := v.l.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if d := v.l.Domain(); d.State != StatePaused || d.Reason != ReasonUser {
		t.Fatalf("after pause: %s", d)
	}
	before := len(v.w.Find(testguest.IsKind(testguest.KindTick)))
	short, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err = v.w.WaitAfter(short, tick.Seq, testguest.IsKind(testguest.KindTick))
	cancel()
	if err == nil {
		t.Fatalf("the guest ticked while paused (%d ticks before)", before)
	}
	if err := v.l.Unpause(ctx); err != nil {
		t.Fatal(err)
	}
	v.waitAfter(stepTimeout, tick.Seq, testguest.IsKind(testguest.KindTick))

	actx := ctxFor(t, stepTimeout)
	if err := v.l.GuestPing(actx); err != nil {
		t.Fatalf("guest agent: %v", err)
	}
	if !v.l.Domain().AgentConnected {
		t.Error("AgentConnected not set")
	}
	if s, err := v.l.Stats(ctx); err != nil || len(s.VCPUs) != 1 || len(s.Blocks) < 4 {
		t.Errorf("stats: %+v %v", s, err)
	}

	t0 := time.Now()
	d, err := v.l.Shutdown(ctx, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != StateShutoff || d.Reason != ReasonGuestShutdown || d.ExitCode == nil || *d.ExitCode != 0 {
		t.Fatalf("after shutdown: %s exit %v", d, d.ExitCode)
	}
	if time.Since(t0) > 30*time.Second {
		t.Errorf("ACPI shutdown took %s", time.Since(t0))
	}
	if _, err := os.Stat(cfg.Dir); !os.IsNotExist(err) {
		t.Errorf("runtime dir left: %v", err)
	}
	if _, err := os.Stat(hostDisk); err != nil {
		t.Errorf("the hostDisk must survive the VM: %v", err)
	}
	if _, err := os.Stat(cg); !os.IsNotExist(err) {
		t.Errorf("device cgroup %s left behind (%v)", cg, err)
	}
}

// Direct kernel boot from the kernel-boot image; the accelerator comes from
// the KVM probe (TCG here, with the reason logged).
func TestKernelBootWithProbe(t *testing.T) {
	vmi := parseVMI(t, `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: kboot}
spec:
  domain:
    memory: {guest: 192Mi}
    firmware:
      kernelBoot:
        kernelArgs: console=ttyS0 quiet kemu.dhcp=0
        container: {image: "oci:_out/testguest/oci/kernelboot", kernelPath: /boot/vmlinuz, initrdPath: /boot/initrd.img}
    devices: {autoattachPodInterface: false}
`)
	a, _ := testguest.Paths()
	cfg := newConfig(t, vmi)
	cfg.Accel = ""
	cfg.KVMProbe = kvm.Options{Kernel: a.Kernel, Initrd: a.Initrd}
	v := start(t, cfg)
	boot := v.wait(bootTimeout, testguest.IsKind(testguest.KindBoot))
	if boot.Fields["loader"] != "direct" {
		t.Errorf("boot marker %v", boot.Fields)
	}
	v.wait(bootTimeout, testguest.IsKind(testguest.KindReady))
	if d := v.l.Domain(); d.Accel == "" {
		t.Errorf("no accelerator recorded: %s", d)
	}
}

// EFI (OVMF, secure boot off) boots the disk image.
func TestEFIBoot(t *testing.T) {
	vmi := parseVMI(t, `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: efi}
spec:
  domain:
    memory: {guest: 256Mi}
    firmware: {bootloader: {efi: {secureBoot: false}}}
    devices:
      autoattachPodInterface: false
      disks: [{name: root, bootOrder: 1, disk: {bus: virtio}}]
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
`)
	v := start(t, newConfig(t, vmi))
	boot := v.wait(bootTimeout, testguest.IsKind(testguest.KindBoot))
	if boot.Fields["firmware"] != "efi" {
		t.Errorf("boot marker %v", boot.Fields)
	}
	v.wait(bootTimeout, testguest.IsKind(testguest.KindReady))
}

// QEMU dying on its own is Shutoff/Crashed with its exit status; the
// runtime directory (overlay, ISO, sockets) is gone.
func TestQEMUCrashIsReported(t *testing.T) {
	vmi := parseVMI(t, `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: crash}
spec:
  startStrategy: Paused
  domain:
    memory: {guest: 128Mi}
    devices:
      autoattachPodInterface: false
      disks: [{name: root, disk: {bus: virtio}}]
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
`)
	cfg := newConfig(t, vmi)
	v := start(t, cfg)
	if d := v.l.Domain(); d.State != StatePaused || d.Reason != ReasonStartPaused {
		t.Fatalf("startStrategy Paused: %s", d)
	}
	if err := syscall.Kill(v.l.Domain().PID, syscall.SIGSEGV); err != nil {
		t.Fatal(err)
	}
	d, err := v.l.Wait(ctxFor(t, stepTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if d.State != StateShutoff || d.Reason != ReasonCrashed || !strings.Contains(d.Message, "signal") {
		t.Fatalf("after SIGSEGV: %s", d)
	}
	if _, err := os.Stat(cfg.Dir); !os.IsNotExist(err) {
		t.Errorf("runtime dir left: %v", err)
	}
}

// With the explicit opt-out QEMU runs in the launcher's own cgroup and the
// domain says it is not confined (the node agent turns that into the
// DevicesConfined=False condition).
func TestNoDeviceCgroupOptOut(t *testing.T) {
	vmi := parseVMI(t, `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: unconfined}
spec:
  startStrategy: Paused
  domain:
    memory: {guest: 128Mi}
    devices:
      autoattachPodInterface: false
      disks: [{name: root, disk: {bus: virtio}}]
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
`)
	cfg := newConfig(t, vmi)
	cfg.NoDeviceCgroup = true
	v := start(t, cfg)
	d := v.l.Domain()
	if d.DeviceCgroup != "" || v.l.DeviceCgroup() != "" {
		t.Fatalf("opted out, yet device cgroup %q", d.DeviceCgroup)
	}
	own, _ := os.ReadFile("/proc/self/cgroup")
	qemu, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", d.PID))
	if err != nil || string(qemu) != string(own) {
		t.Errorf("QEMU's cgroups %q, the launcher's %q (%v)", qemu, own, err)
	}
	if _, err := v.l.Kill(ctxFor(t, stepTimeout)); err != nil {
		t.Fatal(err)
	}
}

// Bad input fails before QEMU starts and leaves nothing behind.
func TestBadInputLeavesNothing(t *testing.T) {
	block := filepath.Join(shortDir(t), "file")
	if err := os.WriteFile(block, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tt := range map[string]struct{ yaml, want string }{
		"missing image": {`apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: bad1}
spec:
  domain: {memory: {guest: 128Mi}, devices: {autoattachPodInterface: false}}
  volumes: [{name: root, containerDisk: {image: "oci:_out/testguest/oci/nothing-here"}}]
`, "spec.volumes[0]"},
		"hostDisk path that cannot be created": {`apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: bad2}
spec:
  domain: {memory: {guest: 128Mi}, devices: {autoattachPodInterface: false}}
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
  - {name: data, hostDisk: {path: ` + block + `/under-a-file.img, type: DiskOrCreate, capacity: 1Mi}}
`, "spec.volumes[1].hostDisk"},
	} {
		t.Run(name, func(t *testing.T) {
			vmi := parseVMI(t, tt.yaml)
			cfg := newConfig(t, vmi)
			l, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = l.Start(ctxFor(t, stepTimeout))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one naming %s", err, tt.want)
			}
			if d := l.Domain(); d.State != StateShutoff || d.Reason != ReasonFailedToStart || d.PID != 0 {
				t.Errorf("state %s pid %d", d, d.PID)
			}
			if _, err := os.Stat(cfg.Dir); !os.IsNotExist(err) {
				t.Errorf("runtime dir left: %v", err)
			}
		})
	}
	// An unknown machine type is refused before anything is made.
	vmi := parseVMI(t, `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: bad3}
spec:
  domain: {memory: {guest: 128Mi}, devices: {autoattachPodInterface: false}}
`)
	vmi.Spec.Domain.Machine.Type = "virt"
	if _, err := New(newConfig(t, vmi)); err == nil || !strings.Contains(err.Error(), "spec.domain.machine.type") {
		t.Fatalf("unknown machine type: %v", err)
	}
}

// Killing the launcher (kemuctl run) with SIGKILL takes QEMU with it.
func TestKilledLauncherTakesQEMU(t *testing.T) {
	root := repoRoot(t)
	bin := filepath.Join(t.TempDir(), "kemuctl")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(root, "cmd", "kemuctl")).CombinedOutput(); err != nil {
		t.Fatalf("build kemuctl: %v\n%s", err, out)
	}
	dir := shortDir(t)
	run := filepath.Join(dir, "run")
	cmd := exec.Command(bin, "run", "--accel", "tcg", "--dir", run, "--image-cache", filepath.Join(dir, "cache"),
		filepath.Join(root, "examples", "standalone", "vmi-testguest.yaml"))
	cmd.Dir = root
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// Wait for "QEMU pid N".
	pid := 0
	buf := make([]byte, 0, 4096)
	deadline := time.Now().Add(stepTimeout)
	for pid == 0 && time.Now().Before(deadline) {
		b := make([]byte, 512)
		n, err := out.Read(b)
		buf = append(buf, b[:n]...)
		if i := strings.Index(string(buf), "QEMU pid "); i >= 0 {
			fmt.Sscanf(string(buf[i:]), "QEMU pid %d", &pid)
		}
		if err != nil {
			break
		}
	}
	if pid == 0 {
		t.Fatalf("kemuctl run did not report QEMU's pid:\n%s", buf)
	}
	go io.Copy(io.Discard, out)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// The killed launcher could not remove QEMU's device cgroup; the next
	// launcher does (see TestStaleDeviceCgroupsAreRemoved) once the dead
	// QEMU has been reaped and the group is empty.
	launcherPID := cmd.Process.Pid
	t.Cleanup(func() {
		left := func() []string {
			m, _ := filepath.Glob(fmt.Sprintf("/sys/fs/cgroup/*/%s*-%d-*", deviceCgroupPrefix, launcherPID))
			m2, _ := filepath.Glob(fmt.Sprintf("/sys/fs/cgroup/%s*-%d-*", deviceCgroupPrefix, launcherPID))
			return append(m, m2...)
		}
		until := time.Now().Add(10 * time.Second)
		for removeStaleDeviceCgroups(); len(left()) > 0; removeStaleDeviceCgroups() {
			if time.Now().After(until) {
				t.Errorf("stale device cgroups left: %v", left())
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	gone := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(gone) {
			t.Fatalf("QEMU %d still alive 10 s after its launcher was killed", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// alive says whether pid runs (a zombie waiting for its reaper does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
