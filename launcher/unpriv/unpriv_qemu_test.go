//go:build qemu

package unpriv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// dropEnv makes this test binary a launcher that drops its capabilities
// and prints its status (TestDropLauncherCapabilities).
const dropEnv = "UNPRIV_TEST_DROP"

func TestMain(m *testing.M) {
	if os.Getenv(dropEnv) == "1" {
		if err := DropLauncherCapabilities(Identity{UID: UID, GID: GID}, LauncherKeeps...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		b, _ := os.ReadFile("/proc/self/status")
		os.Stdout.Write(b)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

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
	s, err := readStatusFile(f.Name())
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

func TestDropLauncherCapabilities(t *testing.T) {
	requireRoot(t)
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), dropEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	s := parse(t, out)
	var want uint64
	for _, c := range LauncherKeeps {
		want |= 1 << uint(c)
	}
	if s.CapEff != want || s.CapPrm != want || s.CapBnd != want || s.CapInh != 0 || s.CapAmb != 0 {
		t.Fatalf("caps eff %x prm %x bnd %x inh %x amb %x; want %x (%v) and no others", s.CapEff, s.CapPrm, s.CapBnd, s.CapInh, s.CapAmb, want, LauncherKeeps)
	}
	if s.UIDs[0] != 0 {
		t.Errorf("the launcher changed user: %v", s.UIDs)
	}
	if !strings.Contains(string(out), " "+strconv.Itoa(GID)) && !strings.Contains(string(out), "\t"+strconv.Itoa(GID)) {
		t.Errorf("the launcher is not in QEMU's group %d:\n%s", GID, out)
	}
}
