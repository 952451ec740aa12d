package seccomp

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/api/launcherpod"
)

// The generated profile is for the launcher's capabilities, refuses by
// default and allows pivot_root (and what passt's sandbox also calls).
func TestProfile(t *testing.T) {
	if !slices.Equal(generatedFor, Capabilities()) {
		t.Fatalf("generated for %v, the launcher's capabilities are %v: run make generate", generatedFor, Capabilities())
	}
	var p struct {
		DefaultAction string `json:"defaultAction"`
		Syscalls      []struct {
			Names  []string `json:"names"`
			Action string   `json:"action"`
			Args   []any    `json:"args"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal(Profile(), &p); err != nil {
		t.Fatal(err)
	}
	if p.DefaultAction != "SCMP_ACT_ERRNO" {
		t.Errorf("defaultAction %s", p.DefaultAction)
	}
	allowed := map[string]bool{}
	for _, s := range p.Syscalls {
		if s.Action == "SCMP_ACT_ALLOW" && len(s.Args) == 0 {
			for _, n := range s.Names {
				allowed[n] = true
			}
		}
	}
	for _, n := range []string{"pivot_root", "unshare", "mount", "umount2", "read", "seccomp"} {
		if !allowed[n] {
			t.Errorf("%s is not allowed unconditionally", n)
		}
	}
	for _, n := range []string{"kexec_load", "init_module", "reboot", "open_by_handle_at"} {
		if allowed[n] {
			t.Errorf("%s is allowed", n)
		}
	}
}

func TestInstall(t *testing.T) {
	root := t.TempDir()
	path, err := Install(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "seccomp", launcherpod.PasstSeccompProfile); path != want {
		t.Errorf("installed at %s, want %s", path, want)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", st.Mode())
	}
	// Unchanged: not rewritten. Changed (an older kemu's): replaced.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(root); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); !st.ModTime().Equal(old) {
		t.Errorf("an unchanged profile was rewritten")
	}
	if err := os.WriteFile(path, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(root); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != string(Profile()) {
		t.Errorf("a stale profile was not replaced")
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("left behind: %v", ents)
	}
}
