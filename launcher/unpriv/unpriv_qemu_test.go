//go:build qemu

package unpriv

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root (make test runs as root)")
	}
}

// parse reads a status dump the way ReadStatus reads /proc.
func parse(t *testing.T, out []byte) Status {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "status")
	if err != nil {
		t.Fatal(err)
	}
	f.Write(out)
	f.Close()
	s, err := ReadStatusFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCommandRunsUnprivileged(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name   string
		groups []int
	}{
		{"no groups", nil},
		{"device group", []int{110}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := Identity{UID: UID, GID: GID, Groups: tc.groups}
			cmd, err := Command(Spec{Identity: id, Umask: 0o027}, "sh", "-c", "cat /proc/self/status; umask; env")
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%v: %s", err, stderr.String())
			}
			s := parse(t, out)
			if err := s.Unprivileged(id); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if s.CapBnd != 0 {
				t.Errorf("CapBnd = %x, want 0", s.CapBnd)
			}
			wantGroups := "Groups:\t" + strconv.Itoa(GID)
			if len(tc.groups) > 0 {
				wantGroups = "Groups:\t" + strconv.Itoa(tc.groups[0])
			}
			if !strings.Contains(string(out), wantGroups) {
				t.Errorf("want %q in\n%s", wantGroups, out)
			}
			if !strings.Contains(string(out), "\n0027\n") {
				t.Errorf("umask not 0027:\n%s", out)
			}
			if strings.Contains(string(out), helperEnv) {
				t.Errorf("the helper's variable reached the program:\n%s", out)
			}
		})
	}
}

func TestCommandErrors(t *testing.T) {
	requireRoot(t)
	if _, err := Command(Spec{Identity: Identity{UID: UID, GID: GID}}, "no-such-qemu"); err == nil {
		t.Fatal("a missing program was accepted")
	}
	// The launcher gone before the helper re-armed the parent-death signal.
	cmd, err := Command(Spec{Identity: Identity{UID: UID, GID: GID}, ParentPID: 1}, "true")
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 127 || !strings.Contains(string(out), "is gone") {
		t.Fatalf("want exit 127 naming the launcher, got %v: %s", err, out)
	}
}
