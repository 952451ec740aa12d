package selinux

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestForVM(t *testing.T) {
	seeded := func() Config {
		c := DefaultConfig()
		c.Rand = rand.New(rand.NewPCG(1, 2))
		return c
	}
	small := seeded()
	small.Categories = 3 // pairs (0,1) (0,2) (1,2)
	tests := []struct {
		name     string
		cfg      Config
		own      string
		running  []string
		process  string // exact, or "" to check the prefix
		file     string
		prefix   string // of a fresh process label
		notLevel []string
		err      string
	}{
		{name: "pod: inherit the runtime's pair", cfg: seeded(),
			own:     "system_u:system_r:container_t:s0:c12,c345",
			process: "system_u:system_r:container_t:s0:c12,c345",
			file:    "system_u:object_r:container_file_t:s0:c12,c345"},
		{name: "standalone unconfined: a fresh sVirt pair", cfg: seeded(),
			own:    "unconfined_u:unconfined_r:unconfined_t:s0-s0:c0.c1023",
			prefix: "system_u:system_r:svirt_t:s0:c"},
		{name: "standalone: pairs of running VMs are skipped", cfg: small,
			own: "unconfined_u:unconfined_r:unconfined_t:s0-s0:c0.c1023",
			running: []string{"system_u:system_r:svirt_t:s0:c0,c1", "system_u:system_r:svirt_t:s0:c1,c2",
				"system_u:system_r:container_t:s0:c0,c2", "garbage", "system_u:system_r:svirt_t:s0"},
			process: "system_u:system_r:svirt_t:s0:c0,c2",
			file:    "system_u:object_r:svirt_image_t:s0:c0,c2"},
		{name: "standalone: every pair taken", cfg: small,
			own: "unconfined_u:unconfined_r:unconfined_t:s0",
			running: []string{"system_u:system_r:svirt_t:s0:c0,c1", "system_u:system_r:svirt_t:s0:c1,c2",
				"system_u:system_r:svirt_t:s0:c0,c2"},
			err: "every MCS category pair is in use"},
		{name: "empty own label", cfg: seeded(), err: "own label is empty"},
		{name: "bad own label", cfg: seeded(), own: "nonsense", err: `own label "nonsense"`},
		{name: "bad config", cfg: Config{}, own: "a:b:c:s0", err: "selinux: invalid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ForVM(tc.cfg, tc.own, tc.running)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.process != "" && (got.Process != tc.process || got.File != tc.file) {
				t.Fatalf("got %+v, want %s / %s", got, tc.process, tc.file)
			}
			if tc.prefix != "" && !strings.HasPrefix(got.Process, tc.prefix) {
				t.Fatalf("process label %q, want prefix %q", got.Process, tc.prefix)
			}
			if got.Level() == "" || !strings.HasSuffix(got.File, got.Level()) {
				t.Fatalf("labels %+v do not share a level", got)
			}
		})
	}
}

func TestForVMUnique(t *testing.T) {
	// Launchers started one after another on one node never share a pair.
	own := "unconfined_u:unconfined_r:unconfined_t:s0-s0:c0.c1023"
	var running []string
	seen := map[string]bool{}
	cfg := DefaultConfig()
	cfg.Categories = 8 // 28 pairs: collisions would show quickly
	for i := 0; i < 28; i++ {
		l, err := ForVM(cfg, own, running)
		if err != nil {
			t.Fatalf("VM %d: %v", i, err)
		}
		if seen[l.Level()] {
			t.Fatalf("VM %d got %s twice", i, l.Level())
		}
		seen[l.Level()] = true
		running = append(running, l.Process)
	}
	if _, err := ForVM(cfg, own, running); err == nil {
		t.Fatal("29th VM got a pair out of 28")
	}
}

func TestLabelTree(t *testing.T) {
	k := installFake(t)
	dir := t.TempDir()
	for _, f := range []string{"overlay.qcow2", "sub/cloudinit.iso"} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := sample.LabelTree(dir); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "overlay.qcow2"), filepath.Join(dir, "sub"), filepath.Join(dir, "sub/cloudinit.iso")} {
		if k.files[p] != sample.File {
			t.Errorf("%s labelled %q, want %q", p, k.files[p], sample.File)
		}
	}
	if err := sample.LabelTree(filepath.Join(dir, "missing")); err == nil {
		t.Error("LabelTree of a missing directory")
	}
}

func TestRunningLabels(t *testing.T) {
	// SELinux is off here: attr/current reads fail or are empty; either way
	// the scan returns without error and only non-empty labels.
	for _, l := range RunningLabels() {
		if l == "" {
			t.Fatal("empty label returned")
		}
	}
}
