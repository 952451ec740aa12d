//go:build qemu

package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/qmp"
)

const agentVMI = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: guestexec}
spec:
  domain:
    memory: {guest: 256Mi}
    devices:
      autoattachPodInterface: false
      disks:
      - {name: root, disk: {bus: virtio}}
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
`

// Exec and the copies against the test guest's qemu-ga at their bounds:
// output past MaxExecOutput is dropped and said so, the exit status and a
// killing signal come back, a command outliving its context is reported,
// a guest file over the copy limit (/dev/zero) fails the copy-out, and a
// failed copy-out leaves no host file.
func TestGuestExecAndCopyBounds(t *testing.T) {
	v := start(t, newConfig(t, parseVMI(t, agentVMI)))
	ctx := ctxFor(t, 6*time.Minute)
	pollPing(t, ctx, v.l, bootTimeout, "after boot")

	t0 := time.Now()
	var out, errOut bytes.Buffer
	cmd := fmt.Sprintf("head -c %d /dev/zero; echo oops >&2; exit 7", MaxExecOutput+100)
	r, err := v.l.Exec(ctx, cmd, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitCode != 7 || r.Signal != 0 || !r.StdoutTruncated || r.StderrTruncated || r.OK() {
		t.Errorf("result %+v", r)
	}
	if out.Len() != MaxExecOutput || errOut.String() != "oops\n" {
		t.Errorf("stdout %d bytes (want %d), stderr %q", out.Len(), MaxExecOutput, errOut.String())
	}

	t.Logf("exec with %d MiB of output: %s", MaxExecOutput>>20, time.Since(t0))
	out.Reset()
	r, err = v.l.Exec(ctx, "echo before; kill -9 $$", &out, &errOut)
	if err != nil || r.Signal != 9 || r.String() != "killed by signal 9" || out.String() != "before\n" {
		t.Errorf("killed: %+v %q %v", r, out.String(), err)
	}

	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = v.l.Exec(short, "sleep 30", &out, &errOut)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "still running in the guest") {
		t.Errorf("a command outliving its context: %v", err)
	}

	// Over the copy limit (a smaller one: 256 MiB take minutes under TCG).
	a, err := v.l.Agent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, err := a.FileOpen(ctx, "/dev/zero", qmp.FileRead)
	if err != nil {
		t.Fatal(err)
	}
	limit := int64(2*qmp.MaxFileChunk + 5)
	var zeros bytes.Buffer
	n, err := copyOut(ctx, a, h, &zeros, limit)
	if !errors.Is(err, ErrCopyTooLarge) || n > limit || n < limit-qmp.MaxFileChunk || int64(zeros.Len()) != n {
		t.Errorf("copy-out of /dev/zero: %d bytes (%d written), %v", n, zeros.Len(), err)
	}
	if err := a.FileClose(ctx, h); err != nil {
		t.Fatal(err)
	}
	// A failed copy-out leaves no host file.
	dir := t.TempDir()
	if _, err := v.l.CopyOut(ctx, "/nonexistent", filepath.Join(dir, "x")); err == nil || !strings.Contains(err.Error(), "No such file") {
		t.Errorf("copy-out of a missing file: %v", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left on the host: %v", left)
	}
	// The agent still works after all that.
	if err := v.l.GuestPing(ctx); err != nil {
		t.Fatal(err)
	}
}
