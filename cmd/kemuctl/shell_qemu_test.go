//go:build qemu

package main

import (
	"bufio"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/test/testguest"
)

// TestShellAgainstKemuctlRun attaches kemuctl shell to the launcher socket
// that kemuctl run prints, with a real QEMU behind it.
func TestShellAgainstKemuctlRun(t *testing.T) {
	root, err := testguest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "kemuctl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dir := testguest.TempDir(t, "kemu-sh-") // QEMU (uid 107) must traverse it
	run := exec.Command(bin, "run", "--accel", "tcg", "--dir", filepath.Join(dir, "run"),
		"--image-cache", filepath.Join(dir, "cache"), "examples/standalone/vmi-testguest.yaml")
	run.Dir = root
	out, _ := run.StdoutPipe()
	run.Stderr = run.Stdout
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run.Process.Kill(); _, _ = run.Process.Wait() })

	sockets := make(chan string, 1)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			t.Log("run: " + line)
			if _, rest, ok := strings.Cut(line, "launcher socket: "); ok {
				sock, _, _ := strings.Cut(rest, " ")
				sockets <- sock
			}
		}
	}()
	var sock string
	select {
	case sock = <-sockets:
	case <-ended:
		t.Fatal("kemuctl run ended without printing its launcher socket")
	case <-time.After(3 * time.Minute):
		t.Fatal("kemuctl run printed no launcher socket in 3 minutes")
	}

	shell := func(commands string) (string, error) {
		out, err := exec.Command(bin, "shell", "--socket", sock, "-c", commands).CombinedOutput()
		return string(out), err
	}
	// The guest agent answers once the guest has booted (TCG: slowly).
	deadline := time.Now().Add(4 * time.Minute)
	for {
		out, err := shell("agent ping")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the guest agent never answered: %v\n%s", err, out)
		}
		time.Sleep(2 * time.Second)
	}

	text, err := shell("status; qmp query-status; pause; qmp query-status; resume; agent ping")
	t.Log(text)
	if err != nil {
		t.Fatalf("kemuctl shell: %v", err)
	}
	for _, want := range []string{"state:    Running", "accelerator tcg", `"status": "running"`, "paused\n",
		`"status": "paused"`, "resumed\n", "agent: ok"} {
		if !strings.Contains(text, want) {
			t.Errorf("the output lacks %q", want)
		}
	}

	text, err = shell("qmp query-no-such-command")
	if err == nil || !strings.Contains(text, "error: qmp query-no-such-command: CommandNotFound") {
		t.Errorf("qmp query-no-such-command: %v\n%s", err, text)
	}
	// Without kemuctl run --allow-raw-qmp: only read-only commands pass,
	// and QEMU's second QMP socket is gone.
	text, err = shell("qmp stop")
	if err == nil || !strings.Contains(text, `error: qmp stop: refused by the launcher: "stop" is not a read-only command: without --allow-raw-qmp`) {
		t.Errorf("qmp stop: %v\n%s", err, text)
	}
	if text, err := shell("status"); err != nil || !strings.Contains(text, "state:    Running") {
		t.Errorf("after a refused stop: %v\n%s", err, text)
	}
	if _, err := os.Stat(filepath.Join(dir, "run", "qmp-debug.sock")); !os.IsNotExist(err) {
		t.Errorf("the debug QMP socket exists without --allow-raw-qmp: %v", err)
	}

	// The guest's screen through the launcher's VNC stream (graphics is on
	// by default), as a PNG.
	shot := filepath.Join(t.TempDir(), "screen.png")
	if text, err := shell("screenshot " + shot); err != nil || !strings.Contains(text, shot+": ") {
		t.Errorf("screenshot: %v\n%s", err, text)
	} else if f, err := os.Open(shot); err != nil {
		t.Error(err)
	} else {
		img, err := png.Decode(f)
		f.Close()
		if err != nil || img.Bounds().Dx() == 0 || !strings.Contains(text, fmt.Sprintf("%dx%d", img.Bounds().Dx(), img.Bounds().Dy())) {
			t.Errorf("screenshot %s: %v (%s)", shot, err, text)
		}
	}

	// kill ends QEMU and so kemuctl run.
	if text, err := shell("kill"); err != nil || !strings.Contains(text, "Shutoff") {
		t.Errorf("kill: %v\n%s", err, text)
	}
	select {
	case <-ended:
	case <-time.After(time.Minute):
		t.Error("kemuctl run still runs a minute after kill")
	}
}
