package cmdline

import (
	"bytes"
	"flag"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// goldenEnv hands out fixed paths and fd numbers.
type goldenEnv struct{ nextFD, nextPort int }

func newGoldenEnv() *goldenEnv { return &goldenEnv{nextFD: 3, nextPort: 2222} }

func (e *goldenEnv) facts(accel string) Facts {
	return Facts{Binary: "qemu-system-x86_64", Accel: accel, VhostNet: true, OVMF: OVMF{
		Code:       "/usr/share/OVMF/OVMF_CODE_4M.fd",
		Vars:       "/usr/share/OVMF/OVMF_VARS_4M.fd",
		SecureCode: "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd",
		SecureVars: "/usr/share/OVMF/OVMF_VARS_4M.ms.fd",
	}}
}

func (e *goldenEnv) paths() Paths {
	return Paths{QMP: "/run/kemu/qmp.sock", QMPDebug: "/run/kemu/qmp-debug.sock",
		Serial: "/run/kemu/serial.sock", GuestAgent: "/run/kemu/qga.sock", VNC: "/run/kemu/vnc.sock", Dir: "/run/kemu"}
}

func (e *goldenEnv) socket(_ testing.TB, name string) string { return path.Join("/run/kemu", name) }
func (e *goldenEnv) overlay(_ testing.TB, name string) string {
	return path.Join("/run/kemu/containerdisks", name+".qcow2")
}
func (e *goldenEnv) image(_ testing.TB, name, format string, _ int64) string {
	return path.Join("/var/lib/kemu/volumes", name+"."+format)
}
func (e *goldenEnv) preallocated(_ testing.TB, name string, _ int64) string {
	return path.Join("/var/lib/kemu/volumes", name+".raw")
}
func (e *goldenEnv) media(_ testing.TB, name string) string {
	return path.Join("/var/lib/kemu/volumes", name+".iso")
}
func (e *goldenEnv) kernel(testing.TB) *KernelBoot {
	return &KernelBoot{Kernel: "/run/kemu/kernel/vmlinuz", Initrd: "/run/kemu/kernel/initrd.img"}
}
func (e *goldenEnv) efiVars(testing.TB, bool) string { return "/run/kemu/efivars.fd" }
func (e *goldenEnv) fds(n int) []int {
	fds := make([]int, n)
	for i := range fds {
		fds[i] = e.nextFD
		e.nextFD++
	}
	return fds
}
func (e *goldenEnv) taps(_ testing.TB, n int) []int     { return e.fds(n) }
func (e *goldenEnv) vhostFDs(_ testing.TB, n int) []int { return e.fds(n) }
func (e *goldenEnv) port(testing.TB) int                { e.nextPort++; return e.nextPort - 1 }

// formatArgv is the golden form: one argument per line.
func formatArgv(argv []string) []byte {
	var b bytes.Buffer
	for _, a := range argv {
		b.WriteString(a)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func TestGolden(t *testing.T) {
	seen := map[string]bool{}
	for _, tc := range cases {
		if seen[tc.name] {
			t.Fatalf("two cases named %s", tc.name)
		}
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			argv, err := Build(tc.input(t, newGoldenEnv()))
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			got := formatArgv(argv)
			file := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(file, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run go test ./launcher/cmdline/ -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("argv differs from %s (-want +got):\n%s", file, lineDiff(string(want), string(got)))
			}
		})
	}
	// Every golden file belongs to a case.
	files, _ := filepath.Glob(filepath.Join("testdata", "*.golden"))
	for _, f := range files {
		if name := strings.TrimSuffix(filepath.Base(f), ".golden"); !seen[name] {
			t.Errorf("%s has no test case", f)
		}
	}
}

// lineDiff is a small line diff: lines only in want (-) and only in got (+),
// in order.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	// Longest common subsequence table.
	lcs := make([][]int, len(w)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(g)+1)
	}
	for i := len(w) - 1; i >= 0; i-- {
		for j := len(g) - 1; j >= 0; j-- {
			if w[i] == g[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var b strings.Builder
	i, j := 0, 0
	for i < len(w) || j < len(g) {
		switch {
		case i < len(w) && j < len(g) && w[i] == g[j]:
			b.WriteString("  " + w[i] + "\n")
			i, j = i+1, j+1
		case j < len(g) && (i == len(w) || lcs[i][j+1] >= lcs[i+1][j]):
			b.WriteString("+ " + g[j] + "\n")
			j++
		default:
			b.WriteString("- " + w[i] + "\n")
			i++
		}
	}
	return b.String()
}
