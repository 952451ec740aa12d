package selinux

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	goselinux "github.com/opencontainers/selinux/go-selinux"
	"k8s.io/klog/v2"
)

// syncBuffer is a bytes.Buffer safe for klog's writer.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// captureKlog sends klog output to a buffer for the test and resets the
// log-once state.
func captureKlog(t *testing.T) *syncBuffer {
	t.Helper()
	buf := &syncBuffer{}
	klog.LogToStderr(false)
	klog.SetOutput(buf)
	disabledOnce = new(sync.Once)
	t.Cleanup(func() {
		klog.Flush()
		klog.SetOutput(os.Stderr)
		klog.LogToStderr(true)
		disabledOnce = new(sync.Once)
	})
	return buf
}

var sample = Label{
	Process: "system_u:system_r:svirt_t:s0:c12,c345",
	File:    "system_u:object_r:svirt_image_t:s0:c12,c345",
}

// TestDisabledHost runs against this host's real SELinux state, which must
// be disabled: every operation is a no-op, logged exactly once.
func TestDisabledHost(t *testing.T) {
	if goselinux.GetEnabled() {
		t.Skip("SELinux is enabled on this host; this test covers the disabled path")
	}
	buf := captureKlog(t)
	if Enabled() {
		t.Fatal("Enabled() = true on a host where go-selinux says disabled")
	}

	for range 3 {
		reset, err := sample.SetExecForThisThread()
		if err != nil {
			t.Fatalf("SetExecForThisThread: %v", err)
		}
		if err := reset(); err != nil {
			t.Fatalf("reset: %v", err)
		}
		// Even paths that do not exist and empty labels: nothing is touched.
		if err := sample.LabelFiles(filepath.Join(t.TempDir(), "missing.qcow2"), ""); err != nil {
			t.Fatalf("LabelFiles: %v", err)
		}
		if err := (Label{}).LabelFiles("/nonexistent"); err != nil {
			t.Fatalf("LabelFiles with empty label: %v", err)
		}
		cmd := exec.Command("true")
		if err := sample.Start(cmd); err != nil {
			t.Fatalf("Start: %v", err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("Wait: %v", err)
		}
	}
	// The real file got no label: there is no security.selinux xattr.
	f := filepath.Join(t.TempDir(), "disk.qcow2")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := sample.LabelFiles(f); err != nil {
		t.Fatal(err)
	}
	if got, _ := goselinux.FileLabel(f); got != "" {
		t.Fatalf("file got label %q on a disabled host", got)
	}

	klog.Flush()
	if n := strings.Count(buf.String(), DisabledMessage); n != 1 {
		t.Fatalf("disabled message logged %d times, want once; log:\n%s", n, buf.String())
	}
}

// fakeKernel stands in for an SELinux kernel: Enabled is true and the
// go-selinux writes are recorded instead of performed.
type fakeKernel struct {
	mu        sync.Mutex
	exec      []string
	files     map[string]string
	execErr   error
	resetErr  error
	fileErrOn string
}

func installFake(t *testing.T) *fakeKernel {
	t.Helper()
	k := &fakeKernel{files: map[string]string{}}
	oldEnabled, oldExec, oldFile := hostEnabled, setExecLabel, setFileLabel
	hostEnabled = func() bool { return true }
	setExecLabel = func(l string) error {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.exec = append(k.exec, l)
		if l == "" {
			return k.resetErr
		}
		return k.execErr
	}
	setFileLabel = func(p, l string) error {
		k.mu.Lock()
		defer k.mu.Unlock()
		if p == k.fileErrOn {
			return errors.New("operation not supported")
		}
		k.files[p] = l
		return nil
	}
	t.Cleanup(func() { hostEnabled, setExecLabel, setFileLabel = oldEnabled, oldExec, oldFile })
	return k
}

func TestEnabledFake(t *testing.T) {
	buf := captureKlog(t)
	k := installFake(t)
	if !Enabled() {
		t.Fatal("Enabled() = false with the fake kernel")
	}

	reset, err := sample.SetExecForThisThread()
	if err != nil {
		t.Fatal(err)
	}
	if err := reset(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(k.exec, "|"); got != sample.Process+"|" {
		t.Fatalf("exec label writes %q, want the process label then a reset", got)
	}

	if err := sample.LabelFiles("/a/overlay.qcow2", "/a/cloudinit.iso", "/a/qmp.sock"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/a/overlay.qcow2", "/a/cloudinit.iso", "/a/qmp.sock"} {
		if k.files[p] != sample.File {
			t.Fatalf("%s labelled %q, want %q", p, k.files[p], sample.File)
		}
	}

	// Errors: every path is tried, errors joined.
	k.fileErrOn = "/a/bad"
	err = sample.LabelFiles("/a/bad", "", "/a/good")
	if err == nil || !strings.Contains(err.Error(), "/a/bad") || !strings.Contains(err.Error(), "empty path") {
		t.Fatalf("LabelFiles error = %v", err)
	}
	if k.files["/a/good"] != sample.File {
		t.Fatal("LabelFiles stopped at the first error")
	}
	if err := (Label{}).LabelFiles("/a/x"); err == nil {
		t.Fatal("LabelFiles with an empty file label succeeded")
	}
	if _, err := (Label{}).SetExecForThisThread(); err == nil {
		t.Fatal("SetExecForThisThread with an empty process label succeeded")
	}

	k.execErr = errors.New("permission denied")
	if _, err := sample.SetExecForThisThread(); err == nil || !strings.Contains(err.Error(), sample.Process) {
		t.Fatalf("SetExecForThisThread error = %v", err)
	}
	k.execErr = nil
	k.resetErr = errors.New("io error")
	reset, err = sample.SetExecForThisThread()
	if err != nil {
		t.Fatal(err)
	}
	if err := reset(); err == nil {
		t.Fatal("reset error swallowed")
	}

	klog.Flush()
	if strings.Contains(buf.String(), DisabledMessage) {
		t.Fatal("disabled message logged while enabled")
	}
}

func TestStartFake(t *testing.T) {
	k := installFake(t)
	cmd := exec.Command("true")
	if err := sample.Start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(k.exec, "|"); got != sample.Process+"|" {
		t.Fatalf("exec label writes %q around Start", got)
	}

	// A failing start still resets the label.
	k.exec = nil
	if err := sample.Start(exec.Command("/nonexistent/qemu")); err == nil {
		t.Fatal("Start of a missing binary succeeded")
	}
	if got := strings.Join(k.exec, "|"); got != sample.Process+"|" {
		t.Fatalf("exec label writes %q around a failed Start", got)
	}

	// A failing set does not start the command.
	k.exec = nil
	k.execErr = errors.New("permission denied")
	cmd = exec.Command("true")
	if err := sample.Start(cmd); err == nil {
		t.Fatal("Start succeeded although the exec label could not be set")
	}
	if cmd.Process != nil {
		t.Fatal("command started without its label")
	}
}

// TestLibraryOnDisabledHost exercises the real go-selinux calls this
// package makes, as far as a host without SELinux allows.
func TestLibraryOnDisabledHost(t *testing.T) {
	if goselinux.GetEnabled() {
		t.Skip("SELinux is enabled on this host")
	}
	// Never unlocked: whatever the writes do, this thread is discarded
	// when the test goroutine ends and forks nothing.
	runtime.LockOSThread()
	// Clearing the exec label is accepted (nothing to clear).
	if err := goselinux.SetExecLabel(""); err != nil {
		t.Fatalf("go-selinux SetExecLabel(\"\") on a disabled host: %v", err)
	}
	// Setting one is refused by the kernel: this is why Label checks
	// Enabled first instead of trying.
	if err := goselinux.SetExecLabel(sample.Process); err == nil {
		t.Log("note: the kernel accepted an exec label write without SELinux")
	}
}
