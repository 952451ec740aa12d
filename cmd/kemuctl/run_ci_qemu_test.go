//go:build qemu

package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/ctl/local"
	"github.com/kemu-dev/kemu/launcher"
	"github.com/kemu-dev/kemu/qmp"
	"github.com/kemu-dev/kemu/test/testguest"
)

// timedLine is a line of kemuctl's output and when it arrived.
type timedLine struct {
	text string
	at   time.Time
}

// kemuctlRunToEnd runs `kemuctl run` on the example VMI with extra flags
// until it exits (within limit) and returns its exit status and output,
// each line with the time it arrived, and how long the process ran. It runs
// under TCG unless extra holds probeKVM.
func kemuctlRunToEnd(t testing.TB, limit time.Duration, extra ...string) (int, string, []timedLine, time.Duration) {
	t.Helper()
	root, err := testguest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "kemuctl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dir := testguest.TempDir(t, "kemu-run-") // QEMU (uid 107) must traverse it
	args := append([]string{"run", "--accel", "tcg", "--dir", filepath.Join(dir, "run"),
		"--image-cache", filepath.Join(dir, "cache"), "--kvm-probe-cache", filepath.Join(dir, "kvm-probe.json")}, extra...)
	cmd := exec.Command(bin, append(args, "examples/standalone/vmi-testguest.yaml")...)
	cmd.Dir = root
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(limit, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	var lines []timedLine
	var out strings.Builder
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		lines = append(lines, timedLine{sc.Text(), time.Now()})
		out.WriteString(sc.Text() + "\n")
	}
	err = cmd.Wait()
	took := time.Since(t0)
	t.Logf("kemuctl %s:\n%s", strings.Join(args, " "), out.String())
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), lines, took
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), lines, took
	}
	t.Fatal(err)
	return -1, "", nil, 0
}

// probeKVM (the last --accel wins) makes kemuctl probe KVM as it does when
// installed: no --accel and no --kvm-probe-kernel, so nothing from this
// repository's _out/.
const probeKVM = "--accel="

// arrived returns when the line text arrived.
func arrived(t *testing.T, lines []timedLine, text string) time.Time {
	t.Helper()
	for _, l := range lines {
		if l.text == text {
			return l.at
		}
	}
	t.Fatalf("no line %q", text)
	return time.Time{}
}

// The CI step, as its command has it (KVM probed, so KVM where it
// works): two execs, one failing; kemuctl runs both, shuts the guest down,
// exits 1; the JUnit file has both cases (one failed), the serial log the
// guest's boot; one line says which accelerator and why.
func TestRunCIExecStepFailing(t *testing.T) {
	tmp := t.TempDir()
	junit, serial := filepath.Join(tmp, "out.xml"), filepath.Join(tmp, "boot.log")
	code, out, _, _ := kemuctlRunToEnd(t, 6*time.Minute, probeKVM, "--wait-agent", "--then", "exec=uname -a", "--then", "exec=false",
		"--junit", junit, "--serial-log", serial)
	if code != local.ExitStepFailed {
		t.Fatalf("exit status %d, want %d", code, local.ExitStepFailed)
	}
	if !strings.Contains(out, "KVM used: ") && !regexp.MustCompile(`KVM not used, the guest runs under TCG \(software emulation, slower\): .*(built-in probe guest|the host's kernel)`).MatchString(out) {
		t.Errorf("no line saying which accelerator the KVM probe chose, with which guest")
	}
	if !strings.Contains(out, "Linux testguest") {
		t.Errorf("uname -a's output not streamed to kemuctl's")
	}
	if !strings.Contains(out, `exec "false": FAILED: exit status 1`) || !strings.Contains(out, "--then steps done: ACPI power-down") {
		t.Errorf("no failed exec or no shutdown after the steps in the output")
	}
	b, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var suite struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Errors   int `xml:"errors,attr"`
		Cases    []struct {
			Name      string    `xml:"name,attr"`
			Failure   *struct{} `xml:"failure"`
			SystemOut string    `xml:"system-out"`
		} `xml:"testcase"`
	}
	if err := xml.Unmarshal(b, &suite); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	if suite.Tests != 2 || suite.Failures != 1 || suite.Errors != 0 || len(suite.Cases) != 2 ||
		suite.Cases[0].Name != "uname -a" || suite.Cases[0].Failure != nil || !strings.HasPrefix(suite.Cases[0].SystemOut, "Linux testguest") ||
		suite.Cases[1].Name != "false" || suite.Cases[1].Failure == nil {
		t.Errorf("JUnit report:\n%s", b)
	}
	log, err := os.ReadFile(serial)
	if err != nil {
		t.Fatal(err)
	}
	// The guest's boot from /init's first marker to its power-off.
	for _, want := range []string{"KEMU-GUEST boot ", "KEMU-GUEST agent status=started", "KEMU-GUEST ready ", "KEMU-GUEST poweroff source=acpi"} {
		if !bytes.Contains(log, []byte(want)) {
			t.Errorf("serial log (%d bytes) without %q", len(log), want)
		}
	}
}

// Every exec passing: exit 0.
func TestRunCIExecPassing(t *testing.T) {
	code, _, _, _ := kemuctlRunToEnd(t, 6*time.Minute, "--wait-agent", "--then", "exec=true")
	if code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
}

// Files go in and out through the guest agent byte for byte (more than one
// chunk); a file over the copy limit is refused with a clear error, and
// the steps after it still run. An exec's output arrives while it runs,
// and its output files do not stay in the guest.
func TestRunCICopyRoundTripAndStreaming(t *testing.T) {
	tmp := t.TempDir()
	data := make([]byte, 3*qmp.MaxFileChunk+17)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	in, back := filepath.Join(tmp, "data.bin"), filepath.Join(tmp, "back.bin")
	text, huge := filepath.Join(tmp, "hello.txt"), filepath.Join(tmp, "huge.bin")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(text, []byte("hello from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(huge, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, launcher.MaxCopySize+1); err != nil { // sparse
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	code, out, lines, _ := kemuctlRunToEnd(t, 6*time.Minute, "--wait-agent",
		"--then", "copy-in="+text+":/tmp/hello.txt", "--then", "exec=cat /tmp/hello.txt",
		"--then", "copy-in="+in+":/tmp/data.bin", "--then", "exec=sha256sum /tmp/data.bin",
		"--then", "copy-out="+back+":/tmp/data.bin",
		"--then", "copy-in="+huge+":/tmp/huge.bin",
		"--then", "exec=echo still running",
		"--then", "exec=echo first; sleep 8; echo second >&2",
		"--then", "exec=ls -a /tmp")
	if code != local.ExitStepFailed {
		t.Fatalf("exit status %d, want %d (the copy over the limit)", code, local.ExitStepFailed)
	}
	for _, want := range []string{"\nhello from the host\n", hex.EncodeToString(sum[:]) + "  /tmp/data.bin",
		"over the copy limit of 256 MiB", "\nstill running\n", "1 CI step(s) failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("output without %q", want)
		}
	}
	// Printed when written, not when the command ended (the sleep
	// leaves 4 s of margin for polling).
	if d := arrived(t, lines, "second").Sub(arrived(t, lines, "first")); d < 4*time.Second {
		t.Errorf("second arrived %s after first: the output was not streamed", d)
	}
	if strings.Contains(out, launcher.ExecDir+"/kemu-exec-") || strings.Contains(out, "\nkemu-exec-") {
		t.Errorf("exec output files left in the guest's %s", launcher.ExecDir)
	}
	got, err := os.ReadFile(back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("copied out %d bytes, not the %d copied in", len(got), len(data))
	}
}
