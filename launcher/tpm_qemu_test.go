//go:build qemu

package launcher

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/launcher/cmdline"
	"github.com/kemu-dev/kemu/launcher/unpriv"
	"github.com/kemu-dev/kemu/test/testguest"
)

const tpmVMI = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: tpm}
spec:
  domain:
    memory: {guest: 256Mi}
    firmware:
      kernelBoot:
        kernelArgs: console=ttyS0 quiet kemu.dhcp=0
        container: {image: "oci:_out/testguest/oci/kernelboot", kernelPath: /boot/vmlinuz, initrdPath: /boot/initrd.img}
    devices:
      autoattachPodInterface: false
      tpm: {}
`

// tpmGetRandom sends TPM2_GetRandom (8 bytes) to /dev/tpm0 with busybox's
// printf and prints the response in hex: tag 8001, size 20, rc 0, 8 bytes.
const tpmGetRandom = `exec 3<>/dev/tpm0 && printf '\200\001\000\000\000\014\000\000\001\173\000\010' >&3 && dd bs=64 count=1 <&3 2>/dev/null | od -An -tx1 | tr -d ' \n'`

// A VMI with a TPM: the guest sees a TPM 2.0 (/dev/tpm0, /dev/tpmrm0,
// sysfs' tpm_version_major 2) that answers a raw TPM2_GetRandom; swtpm is
// QEMU's user with no_new_privs in QEMU's device cgroup; killing it ends
// the VM with the TPM named as the reason, and nothing is left.
func TestTPM(t *testing.T) {
	cfg := newConfig(t, parseVMI(t, tpmVMI))
	t0 := time.Now()
	v := start(t, cfg)
	v.wait(bootTimeout, testguest.IsKind(testguest.KindReady))
	t.Logf("boot to ready with a TPM: %s", time.Since(t0).Round(time.Millisecond))

	if v.l.tpm == nil || v.l.tpm.cmd == nil {
		t.Fatal("no swtpm started")
	}
	pid := v.l.tpm.cmd.Process.Pid
	st, err := unpriv.ReadStatus(pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.UIDs != [4]int{unpriv.UID, unpriv.UID, unpriv.UID, unpriv.UID} || st.GIDs != [4]int{unpriv.GID, unpriv.GID, unpriv.GID, unpriv.GID} || !st.NoNewPrivs {
		t.Errorf("swtpm: uids %v gids %v no_new_privs %v", st.UIDs, st.GIDs, st.NoNewPrivs)
	}
	cg := v.l.DeviceCgroup()
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err != nil || !strings.Contains(string(b), "/"+filepath.Base(cg)+"\n") {
		t.Errorf("swtpm: /proc/pid/cgroup %q, not %s (%v)", b, cg, err)
	}
	t.Logf("swtpm: pid %d VmRSS %d KiB", pid, processRSS(t, pid))
	if st, err := os.Stat(cmdline.TPMSocket(cfg.Dir)); err != nil || st.Mode()&os.ModeSocket == 0 {
		t.Errorf("socket: %v %v", st, err)
	}

	ctx := ctxFor(t, 3*time.Minute)
	pollPing(t, ctx, v.l, bootTimeout, "after boot")
	for _, tc := range []struct{ cmd, want string }{
		{"ls /dev/tpm0 /dev/tpmrm0", "/dev/tpm0\n/dev/tpmrm0\n"},
		{"cat /sys/class/tpm/tpm0/tpm_version_major", "2\n"},
		{tpmGetRandom, "80010000001400000000" + "0008"},
	} {
		var out, errOut bytes.Buffer
		r, err := v.l.Exec(ctx, tc.cmd, &out, &errOut)
		if err != nil || !r.OK() {
			t.Fatalf("%s: %+v %v %s", tc.cmd, r, err, errOut.String())
		}
		if got := out.String(); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: %q, want %q…", tc.cmd, got, tc.want)
		}
		t.Logf("%s: %q", tc.cmd, out.String())
	}

	// swtpm dies: the VM ends, the TPM named.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d, err := v.l.Wait(ctxFor(t, stepTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if d.State != StateShutoff || d.Reason != ReasonCrashed || !strings.Contains(d.Message, "TPM: swtpm ended (signal: killed); QEMU was stopped") {
		t.Errorf("domain %s: %s", d, d.Message)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("swtpm (pid %d) still exists (%v)", pid, err)
	}
	if _, err := os.Stat(cfg.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("runtime directory %s left behind (%v)", cfg.Dir, err)
	}
}

// A persistent TPM's state outlives its launcher: the first launcher makes
// swtpm's state directory on the backend storage (a directory standing in
// for the launcher Pod's claim) and the guest writes 8 random bytes into a
// TPM NV index it defines; the launcher is killed (a Pod's end, no clean
// shutdown); a second launcher, with a new runtime directory, finds the
// state (reused), gives it to swtpm's user again, and its guest reads the
// same 8 bytes from the same NV index. Both guests see QEMU's tpm-crb
// (KubeVirt's model for a persistent TPM).
func TestPersistentTPM(t *testing.T) {
	stateRoot := shortDir(t)
	var data [8]byte
	if _, err := rand.Read(data[:]); err != nil {
		t.Fatal(err)
	}
	yaml := strings.Replace(tpmVMI, "tpm: {}", "tpm: {persistent: true}", 1)
	run := func(first bool) {
		cfg := newConfig(t, parseVMI(t, yaml))
		cfg.VMStateDir = stateRoot
		t0 := time.Now()
		v := start(t, cfg)
		if v.l.tpm == nil || !v.l.tpm.persistent || v.l.tpm.reused == first {
			t.Fatalf("first %v: TPM %+v", first, v.l.tpm)
		}
		ctx := ctxFor(t, 3*time.Minute)
		pollPing(t, ctx, v.l, bootTimeout, "after boot")
		t.Logf("first %v: boot to the agent %s", first, time.Since(t0).Round(time.Millisecond))
		if got := guestOut(t, ctx, v.l, "basename $(readlink /sys/class/tpm/tpm0/device/driver)"); got != "tpm_crb\n" {
			t.Errorf("guest's TPM driver %q, want tpm_crb", got)
		}
		if first {
			for _, c := range [][]byte{testguest.TPMNVDefineSpace, testguest.TPMNVWrite(data)} {
				if got := guestOut(t, ctx, v.l, testguest.TPMCommand(c)); !strings.HasPrefix(got, testguest.TPMSessionsOK) {
					t.Fatalf("TPM command %x: response %s", c, got)
				}
			}
		}
		got := guestOut(t, ctx, v.l, testguest.TPMCommand(testguest.TPMNVRead))
		if !strings.HasPrefix(got, testguest.TPMNVReadOK(data)) {
			t.Errorf("first %v: NV_Read %s, want %s…", first, got, testguest.TPMNVReadOK(data))
		}
		t.Logf("first %v: NV_Read: %s", first, got)
		if _, err := v.l.Kill(ctxFor(t, stepTimeout)); err != nil {
			t.Fatal(err)
		}
		// The state stays, swtpm's user's; the runtime directory goes.
		dir := filepath.Join(stateRoot, "swtpm")
		for _, p := range []string{dir, filepath.Join(dir, swtpmPermanentState)} {
			var st syscall.Stat_t
			if err := syscall.Lstat(p, &st); err != nil || st.Uid != unpriv.UID || st.Gid != unpriv.GID {
				t.Errorf("%s: uid %d gid %d (%v), want swtpm's user %d", p, st.Uid, st.Gid, err, unpriv.UID)
			}
		}
		if _, err := os.Stat(cfg.Dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("runtime directory %s left behind (%v)", cfg.Dir, err)
		}
	}
	run(true)
	run(false)
}
