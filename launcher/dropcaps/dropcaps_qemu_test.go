//go:build qemu

package dropcaps

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/kemu-dev/kemu/launcher/unpriv"
)

// dropEnv makes this test binary a launcher that drops its capabilities
// and prints its status (TestLauncher).
const dropEnv = "DROPCAPS_TEST_DROP"

func TestMain(m *testing.M) {
	if os.Getenv(dropEnv) == "1" {
		if err := Launcher(unpriv.Identity{UID: unpriv.UID, GID: unpriv.GID}, Keep...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		b, _ := os.ReadFile("/proc/self/status")
		os.Stdout.Write(b)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The launcher keeps Keep in its effective, permitted and bounding sets,
// nothing inheritable or ambient, stays root and joins QEMU's group.
func TestLauncher(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (make test runs as root)")
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), dropEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	f := t.TempDir() + "/status"
	if err := os.WriteFile(f, out, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := unpriv.ReadStatusFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var want uint64
	for _, c := range Keep {
		want |= 1 << uint(c)
	}
	if s.CapEff != want || s.CapPrm != want || s.CapBnd != want || s.CapInh != 0 || s.CapAmb != 0 {
		t.Fatalf("caps eff %x prm %x bnd %x inh %x amb %x; want %x (%v) and no others", s.CapEff, s.CapPrm, s.CapBnd, s.CapInh, s.CapAmb, want, Keep)
	}
	if s.UIDs[0] != 0 {
		t.Errorf("the launcher changed user: %v", s.UIDs)
	}
	if !strings.Contains(string(out), " "+strconv.Itoa(unpriv.GID)) && !strings.Contains(string(out), "\t"+strconv.Itoa(unpriv.GID)) {
		t.Errorf("the launcher is not in QEMU's group %d:\n%s", unpriv.GID, out)
	}
}
