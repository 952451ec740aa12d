//go:build qemu

// Integration tests: boot the test guest under QEMU (TCG) and check its
// markers. Run `bash hack/testguest/build.sh` first, then
// `go test -tags qemu ./test/testguest/...`.
package testguest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kdomanski/iso9660"
)

const (
	bootTimeout = 90 * time.Second // one TCG boot, generous for parallel runs on 2 cores
	stepTimeout = 60 * time.Second // any later step (a marker, an agent reply, QEMU's exit)

	ovmfCode = "/usr/share/OVMF/OVMF_CODE_4M.fd"
	ovmfVars = "/usr/share/OVMF/OVMF_VARS_4M.fd"
)

const userData = `#cloud-config
hostname: ignored-by-testguest
runcmd:
  - echo "hello from kemu"
`

// scriptUserData is a user-data script: the guest runs it after ready.
const scriptUserData = "#!/bin/sh\necho from-user-data > /tmp/ud && exit 7\n"

func metaData(iid, host string) string {
	return fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\n", iid, host)
}

func TestBootDirectKernel(t *testing.T) {
	t.Parallel()
	a := artifacts(t)
	dir := tempDir(t)
	extra := rawDisk(t, filepath.Join(dir, "extra.raw"), 16<<20)
	iso := cidataISO(t, filepath.Join(dir, "cidata.iso"), scriptUserData, metaData("iid-direct-1", "direct-guest"))

	vm := startVM(t, dir, true,
		"-kernel", a.Kernel, "-initrd", a.Initrd, "-append", "console=ttyS0 quiet",
		"-drive", "if=none,id=extra,format=raw,file="+extra,
		"-device", "virtio-blk-pci,drive=extra,serial=kemu-extra-1",
		// KubeVirt attaches a NoCloud ISO as an ordinary (virtio) disk.
		"-drive", "if=none,id=cidata,format=raw,readonly=on,file="+iso,
		"-device", "virtio-blk-pci,drive=cidata,serial=cidata",
		"-netdev", "user,id=net0,restrict=on",
		"-device", "virtio-net-pci,netdev=net0,mac=52:54:00:6b:65:01",
		"-device", "pcie-root-port,id=rp1,chassis=1", // for the hotplugs below
		"-device", "pcie-root-port,id=rp2,chassis=2",
	)
	boot := vm.wait(bootTimeout, IsKind(KindBoot))
	checkFields(t, boot, "proto", "1", "kernel", a.KernelVersion, "firmware", "bios", "loader", "direct")
	ready := vm.wait(bootTimeout, IsKind(KindReady))
	t.Logf("ready after %s (guest uptime %ss)", vm.sinceStart(), ready.Field("uptime"))
	checkFields(t, ready, "hostname", "direct-guest")

	blk := vm.wait(stepTimeout, IsKind(KindBlock, "serial", "kemu-extra-1"))
	checkFields(t, blk, "size", "16777216", "bus", "virtio", "ro", "0", "hotplug", "0")
	checkCloudInit(t, vm, "iid-direct-1", "direct-guest", scriptUserData)
	script := vm.waitAfter(stepTimeout, ready.Seq, IsKind(KindUserDataScript, "status", "exited"))
	checkFields(t, script, "rc", "7")

	nic := vm.wait(stepTimeout, IsKind(KindNIC, "mac", "52:54:00:6b:65:01"))
	checkFields(t, nic, "driver", "virtio_net")
	netm := vm.wait(stepTimeout, IsKind(KindNet, "iface", nic.Field("iface")))
	checkFields(t, netm, "status", "bound", "ip", "10.0.2.15/24")

	checkTicks(t, vm, ready)
	checkAgent(t, vm, "direct-guest")
	checkHotplug(t, vm, rawDisk(t, filepath.Join(dir, "hotplug.raw"), 2<<20))

	vm.powerdownACPI()
}

func TestBootDiskSeaBIOS(t *testing.T) {
	t.Parallel()
	a := artifacts(t)
	dir := tempDir(t)
	disk := overlay(t, a.Disk, filepath.Join(dir, "boot.qcow2"))
	scsi := rawDisk(t, filepath.Join(dir, "scsi.raw"), 8<<20)
	sata := rawDisk(t, filepath.Join(dir, "sata.raw"), 4<<20)
	iso := cidataISO(t, filepath.Join(dir, "cidata.iso"), userData, metaData("iid-bios-1", "bios-guest"))

	vm := startVM(t, dir, false,
		"-drive", "if=none,id=boot,format=qcow2,file="+disk,
		"-device", "virtio-blk-pci,drive=boot,serial=kemu-boot,bootindex=0",
		"-device", "virtio-scsi-pci,id=scsi0",
		"-drive", "if=none,id=scsi,format=raw,file="+scsi,
		"-device", "scsi-hd,drive=scsi,bus=scsi0.0,serial=kemu-scsi-1",
		// q35's built-in AHCI controller: ide.0 .. ide.5
		"-drive", "if=none,id=sata,format=raw,file="+sata,
		"-device", "ide-hd,drive=sata,bus=ide.1,serial=kemu-sata-1",
		"-drive", "if=none,id=cd,format=raw,readonly=on,media=cdrom,file="+iso,
		"-device", "ide-cd,drive=cd,bus=ide.0",
	)
	boot := vm.wait(bootTimeout, IsKind(KindBoot))
	checkFields(t, boot, "kernel", a.KernelVersion, "firmware", "bios", "loader", "syslinux-bios")
	ready := vm.wait(bootTimeout, IsKind(KindReady))
	t.Logf("ready after %s (guest uptime %ss)", vm.sinceStart(), ready.Field("uptime"))

	blk := vm.wait(stepTimeout, IsKind(KindBlock, "serial", "kemu-boot"))
	checkFields(t, blk, "bus", "virtio")
	if n, err := blk.Int("size"); err != nil || n <= 0 {
		t.Errorf("boot disk size: %v, %v", n, err)
	}
	scsiM := vm.wait(stepTimeout, IsKind(KindBlock, "serial", "kemu-scsi-1"))
	checkFields(t, scsiM, "bus", "scsi", "size", "8388608")
	sataM := vm.wait(stepTimeout, IsKind(KindBlock, "serial", "kemu-sata-1"))
	checkFields(t, sataM, "bus", "sata", "size", "4194304")
	cd := vm.wait(stepTimeout, IsKind(KindCDROM))
	checkFields(t, cd, "bus", "sata", "media", "1")

	ci := checkCloudInit(t, vm, "iid-bios-1", "bios-guest", userData)
	checkFields(t, ci, "dev", cd.Field("name"), "fs", "iso9660")
	checkTicks(t, vm, ready)

	vm.powerdownACPI()
}

func TestBootDiskOVMF(t *testing.T) {
	t.Parallel()
	a := artifacts(t)
	dir := tempDir(t)
	disk := overlay(t, a.Disk, filepath.Join(dir, "boot.qcow2"))
	vars := filepath.Join(dir, "OVMF_VARS.fd")
	b, err := os.ReadFile(ovmfVars)
	if err != nil {
		t.Fatalf("OVMF (Debian package ovmf): %v", err)
	}
	if err := os.WriteFile(vars, b, 0o600); err != nil {
		t.Fatal(err)
	}

	seed := cidataVFAT(t, filepath.Join(dir, "cidata.vfat"), userData, metaData("iid-efi-1", "efi-guest"))

	vm := startVM(t, dir, true,
		"-drive", "if=pflash,format=raw,unit=0,readonly=on,file="+ovmfCode,
		"-drive", "if=pflash,format=raw,unit=1,file="+vars,
		"-drive", "if=none,id=boot,format=qcow2,file="+disk,
		"-device", "virtio-blk-pci,drive=boot,serial=kemu-boot,bootindex=0",
		"-drive", "if=none,id=seed,format=raw,readonly=on,file="+seed,
		"-device", "virtio-blk-pci,drive=seed",
	)
	boot := vm.wait(bootTimeout, IsKind(KindBoot))
	checkFields(t, boot, "kernel", a.KernelVersion, "firmware", "efi", "loader", "syslinux-efi")
	ready := vm.wait(bootTimeout, IsKind(KindReady))
	t.Logf("ready after %s (guest uptime %ss)", vm.sinceStart(), ready.Field("uptime"))
	checkFields(t, ready, "hostname", "efi-guest")
	vm.wait(stepTimeout, IsKind(KindBlock, "serial", "kemu-boot"))
	seedM := vm.wait(stepTimeout, IsKind(KindBlock, "serial", "", "ro", "1"))
	ci := checkCloudInit(t, vm, "iid-efi-1", "efi-guest", userData)
	checkFields(t, ci, "dev", seedM.Field("name"), "fs", "vfat")
	checkTicks(t, vm, ready)
	checkAgent(t, vm, "efi-guest")

	// Shut down through the agent: qemu-ga runs /sbin/shutdown -P +0 ...
	q := vm.dialAgent()
	if err := q.send("guest-shutdown", nil); err != nil {
		t.Fatal(err)
	}
	vm.wait(stepTimeout, IsKind(KindPoweroff, "source", "agent"))
	vm.waitExit0()
}

// ------------------------------------------------------------------ checks --

func checkFields(t *testing.T, m Marker, kv ...string) {
	t.Helper()
	for i := 0; i < len(kv); i += 2 {
		if got, ok := m.Get(kv[i]); !ok || got != kv[i+1] {
			t.Errorf("marker %q: %s = %q (present %v), want %q", m.Raw, kv[i], got, ok, kv[i+1])
		}
	}
}

// checkCloudInit checks the cidata, userdata and metadata markers and
// returns the cidata one.
func checkCloudInit(t *testing.T, vm *qemuVM, iid, host, userData string) Marker {
	t.Helper()
	ci := vm.wait(stepTimeout, IsKind(KindCIData))
	if ci.Field("status") != "found" {
		t.Fatalf("no cloud-init data source: %q", ci.Raw)
	}
	checkFields(t, ci, "source", "nocloud", "files", "meta-data,user-data")
	ud := vm.wait(stepTimeout, IsKind(KindUserData))
	sum := sha256.Sum256([]byte(userData))
	checkFields(t, ud, "source", "nocloud", "size", fmt.Sprint(len(userData)),
		"sha256", hex.EncodeToString(sum[:]), "first", strings.SplitN(userData, "\n", 2)[0])
	if b, err := base64.StdEncoding.DecodeString(ud.Field("b64")); err != nil || string(b) != userData {
		t.Errorf("userdata b64 = %q (%v), want %q", b, err, userData)
	}
	md := vm.wait(stepTimeout, IsKind(KindMetaData))
	checkFields(t, md, "instance-id", iid, "local-hostname", host)
	return ci
}

// checkTicks waits for two ticks after ready, one apart.
func checkTicks(t *testing.T, vm *qemuVM, ready Marker) {
	t.Helper()
	t1 := vm.waitAfter(stepTimeout, ready.Seq, IsKind(KindTick))
	t2 := vm.waitAfter(stepTimeout, t1.Seq, IsKind(KindTick))
	n1, err1 := t1.Int("n")
	n2, err2 := t2.Int("n")
	if err1 != nil || err2 != nil || n2 != n1+1 {
		t.Errorf("ticks %q then %q", t1.Raw, t2.Raw)
	}
}

// checkHotplug plugs a virtio-blk disk into the root port rp1 and a
// virtio-net NIC into rp2, and unplugs both.
func checkHotplug(t *testing.T, vm *qemuVM, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	if _, err := vm.qmp.execute(ctx, "blockdev-add", map[string]any{
		"driver": "raw", "node-name": "hp0",
		"file": map[string]any{"driver": "file", "filename": path},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := vm.qmp.execute(ctx, "device_add", map[string]any{
		"driver": "virtio-blk-pci", "id": "hpdisk", "drive": "hp0", "bus": "rp1", "serial": "kemu-hotplug-1",
	}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	add := vm.wait(stepTimeout, IsKind(KindBlock, "serial", "kemu-hotplug-1", "hotplug", "1"))
	checkFields(t, add, "size", "2097152")
	t.Logf("hotplugged disk reported after %s", time.Since(start).Round(time.Millisecond))
	if _, err := vm.qmp.execute(ctx, "device_del", map[string]any{"id": "hpdisk"}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	vm.waitAfter(stepTimeout, add.Seq, IsKind(KindBlockRemoved, "name", add.Field("name")))
	if _, err := vm.qmp.waitEvent(ctx, "DEVICE_DELETED"); err != nil {
		t.Error(err)
	}
	t.Logf("unplugged disk reported after %s", time.Since(start).Round(time.Millisecond))

	// A NIC into rp2: reported, then configured by DHCP.
	if _, err := vm.qmp.execute(ctx, "netdev_add", map[string]any{"type": "user", "id": "hpnet", "restrict": true}); err != nil {
		t.Fatal(err)
	}
	if _, err := vm.qmp.execute(ctx, "device_add", map[string]any{
		"driver": "virtio-net-pci", "id": "hpnic", "netdev": "hpnet", "bus": "rp2", "mac": "52:54:00:6b:65:02",
	}); err != nil {
		t.Fatal(err)
	}
	nic := vm.wait(stepTimeout, IsKind(KindNIC, "mac", "52:54:00:6b:65:02", "hotplug", "1"))
	netm := vm.wait(stepTimeout, IsKind(KindNet, "iface", nic.Field("iface"), "mac", "52:54:00:6b:65:02"))
	checkFields(t, netm, "status", "bound", "ip", "10.0.2.15/24")
	if _, err := vm.qmp.execute(ctx, "device_del", map[string]any{"id": "hpnic"}); err != nil {
		t.Fatal(err)
	}
	vm.waitAfter(stepTimeout, nic.Seq, IsKind(KindNICRemoved, "iface", nic.Field("iface")))
}

// checkAgent pings the guest agent, reads its OS info and runs a command
// that must print the guest's hostname.
func checkAgent(t *testing.T, vm *qemuVM, hostname string) {
	t.Helper()
	ag := vm.wait(stepTimeout, IsKind(KindAgent))
	checkFields(t, ag, "status", "started")
	q := vm.dialAgent()
	defer q.close()
	start := time.Now()
	if _, err := q.call("guest-ping", nil); err != nil {
		t.Fatalf("guest-ping: %v", err)
	}
	t.Logf("guest-ping answered in %s", time.Since(start).Round(time.Millisecond))
	raw, err := q.call("guest-get-osinfo", nil)
	if err != nil {
		t.Fatalf("guest-get-osinfo: %v", err)
	}
	var info struct {
		ID            string `json:"id"`
		KernelRelease string `json:"kernel-release"`
	}
	if err := json.Unmarshal(raw, &info); err != nil || info.ID != "kemu-testguest" {
		t.Errorf("guest-get-osinfo = %s (%v)", raw, err)
	}

	raw, err = q.call("guest-exec", map[string]any{
		"path": "/bin/sh", "arg": []string{"-c", "cat /proc/sys/kernel/hostname"}, "capture-output": true,
	})
	if err != nil {
		t.Fatalf("guest-exec: %v", err)
	}
	var pid struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal(raw, &pid); err != nil {
		t.Fatalf("guest-exec = %s: %v", raw, err)
	}
	deadline := time.Now().Add(stepTimeout)
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for {
		raw, err = q.call("guest-exec-status", map[string]any{"pid": pid.PID})
		if err != nil {
			t.Fatalf("guest-exec-status: %v", err)
		}
		var st struct {
			Exited   bool   `json:"exited"`
			ExitCode int    `json:"exitcode"`
			OutData  string `json:"out-data"`
		}
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Fatalf("guest-exec-status = %s: %v", raw, err)
		}
		if st.Exited {
			out, _ := base64.StdEncoding.DecodeString(st.OutData)
			if st.ExitCode != 0 || strings.TrimSpace(string(out)) != hostname {
				t.Errorf("guest-exec: exit %d, output %q, want %q", st.ExitCode, out, hostname)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("guest-exec: not done after %s", stepTimeout)
		}
		<-poll.C
	}
}

// ----------------------------------------------------------------- fixtures --

func artifacts(t testing.TB) Artifacts {
	t.Helper()
	a, err := Paths()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// tempDir is a short directory (unix socket paths are limited to 108 bytes).
func tempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kemu-tg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func rawDisk(t *testing.T, path string, size int64) string {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	return path
}

func overlay(t testing.TB, base, path string) string {
	t.Helper()
	out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", base, path).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	return path
}

// cidataISO writes a NoCloud seed ISO (volume label "cidata").
func cidataISO(t *testing.T, path, userData, metaData string) string {
	t.Helper()
	w, err := iso9660.NewWriter()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Cleanup()
	if err := w.AddFile(strings.NewReader(userData), "user-data"); err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile(strings.NewReader(metaData), "meta-data"); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTo(f, "cidata"); err != nil {
		f.Close()
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// cidataVFAT writes a NoCloud seed as a bare FAT filesystem labelled CIDATA
// (mkfs.vfat and mcopy from dosfstools and mtools).
func cidataVFAT(t *testing.T, path, userData, metaData string) string {
	t.Helper()
	dir := filepath.Dir(path)
	for name, content := range map[string]string{"user-data": userData, "meta-data": metaData} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"mkfs.vfat", "-C", "-n", "CIDATA", path, "2048"},
		{"mcopy", "-i", path, filepath.Join(dir, "user-data"), filepath.Join(dir, "meta-data"), "::/"},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
	}
	return path
}

// ---------------------------------------------------------------------- VM --

type qemuVM struct {
	t       testing.TB
	dir     string
	cmd     *exec.Cmd
	stderr  *SyncBuffer
	exited  chan struct{}
	exitErr error
	started time.Time
	serial  net.Conn
	qmp     *qmpConn
	w       *Watcher
}

// startVM starts QEMU paused (-S), attaches to its serial console and QMP
// sockets, then resumes it, so no console output is lost.
func startVM(t testing.TB, dir string, agent bool, extra ...string) *qemuVM {
	t.Helper()
	args := []string{
		"-machine", "q35,accel=tcg", "-m", "256", "-smp", "1",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-S",
		"-chardev", "socket,id=ser0,path=" + filepath.Join(dir, "serial.sock") + ",server=on,wait=off",
		"-serial", "chardev:ser0",
		"-qmp", "unix:" + filepath.Join(dir, "qmp.sock") + ",server=on,wait=off",
	}
	if agent {
		args = append(args,
			"-device", "virtio-serial-pci,id=vser0",
			"-chardev", "socket,id=qga0,path="+filepath.Join(dir, "qga.sock")+",server=on,wait=off",
			"-device", "virtserialport,bus=vser0.0,chardev=qga0,name=org.qemu.guest_agent.0")
	}
	args = append(args, extra...)
	vm := &qemuVM{t: t, dir: dir, stderr: &SyncBuffer{}, exited: make(chan struct{})}
	vm.cmd = exec.Command("qemu-system-x86_64", args...)
	vm.cmd.Stdout = vm.stderr
	vm.cmd.Stderr = vm.stderr
	if err := vm.cmd.Start(); err != nil {
		t.Fatalf("start QEMU: %v", err)
	}
	go func() {
		vm.exitErr = vm.cmd.Wait()
		close(vm.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-vm.exited:
		default:
			_ = vm.cmd.Process.Kill()
			<-vm.exited
		}
		if vm.qmp != nil {
			vm.qmp.close()
		}
		if vm.serial != nil {
			vm.serial.Close()
		}
		if t.Failed() {
			t.Logf("QEMU %s\nQEMU output:\n%s", strings.Join(args, " "), vm.stderr.String())
			if vm.w != nil {
				t.Logf("serial console:\n%s", vm.w.Log())
			}
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	var err error
	if vm.serial, err = vm.dialUnix(ctx, filepath.Join(dir, "serial.sock")); err != nil {
		t.Fatalf("serial: %v", err)
	}
	vm.w = NewWatcher(vm.serial)
	qc, err := vm.dialUnix(ctx, filepath.Join(dir, "qmp.sock"))
	if err != nil {
		t.Fatalf("QMP: %v", err)
	}
	if vm.qmp, err = newQMP(ctx, qc); err != nil {
		t.Fatalf("QMP handshake: %v", err)
	}
	vm.started = time.Now()
	if _, err := vm.qmp.execute(ctx, "cont", nil); err != nil {
		t.Fatalf("cont: %v", err)
	}
	return vm
}

// dialUnix connects to a socket QEMU creates, retrying until ctx ends or
// QEMU exits.
func (vm *qemuVM) dialUnix(ctx context.Context, path string) (net.Conn, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := net.Dial("unix", path)
		if err == nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: %w (last: %v)", path, ctx.Err(), err)
		case <-vm.exited:
			return nil, fmt.Errorf("QEMU exited (%v): %s", vm.exitErr, vm.stderr.String())
		case <-tick.C:
		}
	}
}

func (vm *qemuVM) sinceStart() time.Duration { return time.Since(vm.started).Round(time.Millisecond) }

func (vm *qemuVM) wait(d time.Duration, pred Predicate) Marker {
	vm.t.Helper()
	return vm.waitAfter(d, 0, pred)
}

func (vm *qemuVM) waitAfter(d time.Duration, seq int, pred Predicate) Marker {
	vm.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	m, err := vm.w.WaitAfter(ctx, seq, pred)
	if err != nil {
		vm.t.Fatal(err)
	}
	return m
}

// powerdownACPI presses the ACPI power button and expects the guest to
// report it and QEMU to exit 0.
func (vm *qemuVM) powerdownACPI() {
	vm.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	if _, err := vm.qmp.execute(ctx, "system_powerdown", nil); err != nil {
		vm.t.Fatalf("system_powerdown: %v", err)
	}
	vm.wait(stepTimeout, IsKind(KindPoweroff, "source", "acpi"))
	if _, err := vm.qmp.waitEvent(ctx, "SHUTDOWN"); err != nil {
		vm.t.Errorf("SHUTDOWN event: %v", err)
	}
	vm.waitExit0()
}

func (vm *qemuVM) waitExit0() {
	vm.t.Helper()
	select {
	case <-vm.exited:
		if vm.exitErr != nil {
			vm.t.Fatalf("QEMU exited: %v: %s", vm.exitErr, vm.stderr.String())
		}
	case <-time.After(stepTimeout):
		vm.t.Fatalf("QEMU still running %s after poweroff", stepTimeout)
	}
}

func (vm *qemuVM) dialAgent() *qgaConn {
	vm.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	c, err := vm.dialUnix(ctx, filepath.Join(vm.dir, "qga.sock"))
	if err != nil {
		vm.t.Fatalf("guest agent socket: %v", err)
	}
	q := &qgaConn{c: c, dec: json.NewDecoder(c)}
	vm.t.Cleanup(q.close)
	// guest-sync discards anything stale and proves the channel works.
	if err := q.sync(); err != nil {
		vm.t.Fatalf("guest-sync: %v", err)
	}
	return q
}

// --------------------------------------------------------------------- QMP --

// qmpConn is a minimal QMP client: one command at a time, events recorded.
type qmpConn struct {
	c       net.Conn
	replies chan qmpMsg
	mu      sync.Mutex
	events  []qmpMsg
	changed chan struct{}
	done    chan struct{}
	cmdMu   sync.Mutex
}

type qmpMsg struct {
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
	QMP   json.RawMessage `json:"QMP"`
}

func newQMP(ctx context.Context, c net.Conn) (*qmpConn, error) {
	q := &qmpConn{c: c, replies: make(chan qmpMsg, 16), changed: make(chan struct{}), done: make(chan struct{})}
	greeting := make(chan struct{})
	go func() {
		defer close(q.done)
		r := bufio.NewReaderSize(c, 1<<20)
		first := true
		for {
			line, err := r.ReadBytes('\n')
			if len(bytes.TrimSpace(line)) > 0 {
				var m qmpMsg
				if json.Unmarshal(line, &m) == nil {
					switch {
					case m.QMP != nil && first:
						first = false
						close(greeting)
					case m.Event != "":
						q.mu.Lock()
						q.events = append(q.events, m)
						close(q.changed)
						q.changed = make(chan struct{})
						q.mu.Unlock()
					default:
						q.replies <- m
					}
				}
			}
			if err != nil {
				return
			}
		}
	}()
	select {
	case <-greeting:
	case <-q.done:
		return nil, errors.New("QMP closed before its greeting")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if _, err := q.execute(ctx, "qmp_capabilities", nil); err != nil {
		return nil, err
	}
	return q, nil
}

func (q *qmpConn) execute(ctx context.Context, cmd string, args any) (json.RawMessage, error) {
	q.cmdMu.Lock()
	defer q.cmdMu.Unlock()
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = q.c.SetWriteDeadline(dl)
	}
	if _, err := q.c.Write(append(b, '\n')); err != nil {
		return nil, err
	}
	select {
	case m := <-q.replies:
		if m.Error != nil {
			return nil, fmt.Errorf("%s: %s: %s", cmd, m.Error.Class, m.Error.Desc)
		}
		return m.Return, nil
	case <-q.done:
		return nil, fmt.Errorf("%s: QMP connection closed", cmd)
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", cmd, ctx.Err())
	}
}

// waitEvent returns the first event with that name since the connection started.
func (q *qmpConn) waitEvent(ctx context.Context, name string) (qmpMsg, error) {
	for i := 0; ; {
		q.mu.Lock()
		for ; i < len(q.events); i++ {
			if q.events[i].Event == name {
				e := q.events[i]
				q.mu.Unlock()
				return e, nil
			}
		}
		changed := q.changed
		q.mu.Unlock()
		select {
		case <-changed:
		case <-q.done:
			// The reader may have queued the event just before closing.
			q.mu.Lock()
			for _, e := range q.events[i:] {
				if e.Event == name {
					q.mu.Unlock()
					return e, nil
				}
			}
			q.mu.Unlock()
			return qmpMsg{}, fmt.Errorf("QMP closed before event %s", name)
		case <-ctx.Done():
			return qmpMsg{}, fmt.Errorf("event %s: %w", name, ctx.Err())
		}
	}
}

func (q *qmpConn) close() { q.c.Close() }

// ------------------------------------------------------------- guest agent --

type qgaConn struct {
	c   net.Conn
	dec *json.Decoder
}

func (q *qgaConn) close() { q.c.Close() }

func (q *qgaConn) send(cmd string, args any) error {
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	_ = q.c.SetWriteDeadline(time.Now().Add(stepTimeout))
	_, err = q.c.Write(append(b, '\n'))
	return err
}

func (q *qgaConn) call(cmd string, args any) (json.RawMessage, error) {
	if err := q.send(cmd, args); err != nil {
		return nil, err
	}
	return q.read()
}

func (q *qgaConn) read() (json.RawMessage, error) {
	_ = q.c.SetReadDeadline(time.Now().Add(stepTimeout))
	var m qmpMsg
	if err := q.dec.Decode(&m); err != nil {
		return nil, err
	}
	if m.Error != nil {
		return nil, fmt.Errorf("%s: %s", m.Error.Class, m.Error.Desc)
	}
	return m.Return, nil
}

func (q *qgaConn) sync() error {
	id := time.Now().UnixNano() & 0x7fffffff
	if err := q.send("guest-sync", map[string]any{"id": id}); err != nil {
		return err
	}
	for {
		raw, err := q.read()
		if err != nil {
			return err
		}
		var got int64
		if json.Unmarshal(raw, &got) == nil && got == id {
			return nil
		}
	}
}
