package kvm

import (
	"bytes"
	"debug/elf"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cavaliergopher/cpio"
)

// withHostKernels makes chooseGuest look for the host's kernel at paths.
func withHostKernels(t *testing.T, paths ...string) {
	t.Helper()
	old := hostKernels
	hostKernels = func(string) []string { return paths }
	t.Cleanup(func() { hostKernels = old })
}

func TestChooseGuest(t *testing.T) {
	dir := t.TempDir()
	kernel := filepath.Join(dir, "vmlinuz")
	if err := os.WriteFile(kernel, []byte("kernel"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		o           Options
		hostKernels []string
		wantDesc    string
		wantArg     string
		wantErr     string
	}{
		{name: "configured", o: Options{Kernel: kernel, Initrd: kernel}, wantDesc: "a Linux guest", wantArg: "-kernel"},
		{name: "kernel without initrd", o: Options{Kernel: kernel}, wantErr: "needs an initramfs"},
		{name: "missing kernel", o: Options{Kernel: "/nonexistent/vmlinuz", Initrd: kernel}, wantErr: "/nonexistent/vmlinuz"},
		{name: "host kernel", hostKernels: []string{"/nonexistent/vmlinuz", kernel}, wantDesc: "the host's kernel " + kernel, wantArg: "-initrd"},
		{name: "no host kernel", hostKernels: []string{"/nonexistent/vmlinuz"}, wantDesc: "built-in probe guest", wantArg: "virtio-blk-pci,drive=probe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withHostKernels(t, tc.hostKernels...)
			g, err := chooseGuest(tc.o, t.TempDir())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(g.desc, tc.wantDesc) || !strings.Contains(strings.Join(g.args, " "), tc.wantArg) || g.key == "" {
				t.Errorf("guest %+v, want %q with %q", g, tc.wantDesc, tc.wantArg)
			}
		})
	}
}

// The generated initramfs holds exactly /init, the static program.
func TestInitramfs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "initrd")
	if err := writeInitramfs(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := cpio.NewReader(f)
	hdr, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if hdr.Name != "init" || !hdr.Mode.IsRegular() || hdr.Mode.Perm() != 0o755 {
		t.Errorf("entry %q mode %v", hdr.Name, hdr.Mode)
	}
	b, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(b, probeInit) {
		t.Errorf("init: %d bytes, %v", len(b), err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("more than one entry: %v", err)
	}
	e, err := elf.NewFile(bytes.NewReader(probeInit))
	if err != nil {
		t.Fatal(err)
	}
	if e.Machine != elf.EM_X86_64 || e.Type != elf.ET_EXEC {
		t.Errorf("init is not an x86-64 executable: %v %v", e.Machine, e.Type)
	}
	for _, p := range e.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("init is not static: %v", p.Type)
		}
	}
	if len(bootSector) != 512 || bootSector[510] != 0x55 || bootSector[511] != 0xaa {
		t.Errorf("boot sector: %d bytes, no boot signature", len(bootSector))
	}
}
