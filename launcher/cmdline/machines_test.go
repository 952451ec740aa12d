package cmdline

import (
	"strings"
	"testing"
)

// Excerpts of `qemu-system-x86_64 -machine help`: Debian 12's QEMU 7.2 and
// Debian 13's QEMU 10.0.
const (
	machineHelp72 = `Supported machines are:
microvm              microvm (i386)
pc                   Standard PC (i440FX + PIIX, 1996) (alias of pc-i440fx-7.2)
pc-i440fx-7.2        Standard PC (i440FX + PIIX, 1996) (default)
pc-i440fx-1.4        Standard PC (i440FX + PIIX, 1996) (deprecated)
q35                  Standard PC (Q35 + ICH9, 2009) (alias of pc-q35-7.2)
pc-q35-7.2           Standard PC (Q35 + ICH9, 2009)
isapc                ISA-only PC
none                 empty machine
x-remote             Experimental remote machine
`
	machineHelp100 = `Supported machines are:
microvm              microvm (i386)
nitro-enclave        AWS Nitro Enclave
pc                   Standard PC (i440FX + PIIX, 1996) (alias of pc-i440fx-10.0)
pc-i440fx-10.0       Standard PC (i440FX + PIIX, 1996) (default)
pc-i440fx-2.4        Standard PC (i440FX + PIIX, 1996) (deprecated)
q35                  Standard PC (Q35 + ICH9, 2009) (alias of pc-q35-10.0)
pc-q35-10.0          Standard PC (Q35 + ICH9, 2009)
pc-q35-4.0.1         Standard PC (Q35 + ICH9, 2009) (deprecated)
isapc                ISA-only PC
none                 empty machine
x-remote             Experimental remote machine
`
)

func TestParseMachineHelp(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		resolve   map[string]string // name → Resolve; "" = not there
	}{
		{"QEMU 7.2", machineHelp72, map[string]string{
			"pc": "pc-i440fx-7.2", "q35": "pc-q35-7.2", "pc-q35-7.2": "pc-q35-7.2", "pc-i440fx-1.4": "pc-i440fx-1.4",
			"microvm": "microvm", "pc-q35-10.0": "", "Supported": "", "help": ""}},
		{"QEMU 10.0", machineHelp100, map[string]string{
			"pc": "pc-i440fx-10.0", "q35": "pc-q35-10.0", "pc-q35-10.0": "pc-q35-10.0", "pc-q35-4.0.1": "pc-q35-4.0.1",
			"pc-i440fx-1.4": "", "pc-q35-7.2": "", "nitro-enclave": "nitro-enclave"}},
		{"empty", "", map[string]string{"pc": ""}},
		{"header only", "Supported machines are:\n", map[string]string{"pc": "", "Supported": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := ParseMachineHelp([]byte(tc.out))
			for name, want := range tc.resolve {
				if got := m.Resolve(name); got != want || m.Has(name) != (want != "") {
					t.Errorf("%s: Resolve = %q, Has = %v; want %q", name, got, m.Has(name), want)
				}
			}
		})
	}
}

// Build refuses a machine type the node's QEMU does not have, naming the
// field, when the machine types were detected; undetected (nil) leaves it
// to QEMU.
func TestBuildMachineDetected(t *testing.T) {
	for _, tc := range []struct {
		name, machine, help string
		nilMachines         bool
		wantErr             string
	}{
		{name: "alias on 7.2", machine: "q35", help: machineHelp72},
		{name: "alias on 10.0", machine: "q35", help: machineHelp100},
		{name: "10.0 machine on 10.0", machine: "pc-q35-10.0", help: machineHelp100},
		{name: "10.0 machine on 7.2", machine: "pc-q35-10.0", help: machineHelp72,
			wantErr: `spec.domain.machine.type: "pc-q35-10.0": this node's QEMU has no such machine type`},
		{name: "machine 10.0 dropped", machine: "pc-i440fx-1.4", help: machineHelp100,
			wantErr: `spec.domain.machine.type: "pc-i440fx-1.4": this node's QEMU has no such machine type`},
		{name: "not detected", machine: "pc-q35-10.0", nilMachines: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(t, baseYAML)
			in.VMI.Spec.Domain.Machine.Type = tc.machine
			if !tc.nilMachines {
				in.Facts.Machines = ParseMachineHelp([]byte(tc.help))
			}
			argv, err := Build(in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Build: %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			if !strings.Contains(strings.Join(argv, " "), "-machine "+tc.machine+",") {
				t.Errorf("argv has no -machine %s: %q", tc.machine, argv)
			}
		})
	}
}
