//go:build qemu

package cmdline

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
	"github.com/kemu-dev/kemu/qmp"
	"github.com/kemu-dev/kemu/test/testguest"
)

// TestQEMULimits checks api/validation's QEMU limits against the real QEMU
// on both sides: at the limit QEMU starts (reaches prelaunch), one past it
// QEMU refuses with the error validation spares the user. Past the limit
// the argv is rendered by Build from an unvalidated VMI, or edited, since
// Build refuses it too.
func TestQEMULimits(t *testing.T) {
	art, err := testguest.Paths()
	if err != nil {
		t.Fatal(err)
	}
	// The QEMU's own machine types: what "pc" is, and a q35 machine newer
	// than any it has (QEMU versions differ; nothing assumed).
	machines, err := DetectMachines(context.Background(), qemuBinary)
	if err != nil {
		t.Fatal(err)
	}
	newer := newerQ35(t, machines)
	pciCase := func() testCase {
		for _, tc := range cases {
			if tc.name == "pci-slots" {
				return tc
			}
		}
		t.Fatal("no pci-slots case")
		return testCase{}
	}()
	for _, tc := range []struct {
		name   string
		mod    func(t testing.TB, e env, in *Input) // on the pci-slots input
		edit   func(argv []string) []string
		refuse string // QEMU's error; "" = QEMU starts
	}{
		{name: "PCI root bus full", mod: func(testing.TB, env, *Input) {}},
		{name: "one PCI device more", mod: func(t testing.TB, e env, in *Input) {
			d := &in.VMI.Spec.Domain.Devices
			d.Disks = append(d.Disks, v1.Disk{Name: "v25", Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}})
			in.Drives["v25"] = Drive{Path: e.image(t, "v25", FormatQCOW2, mib), Format: FormatQCOW2}
		}, refuse: "PCI: no slot/function available"},
		{name: "bootOrder at MaxBootOrder", mod: func(_ testing.TB, _ env, in *Input) {
			in.VMI.Spec.Domain.Devices.Disks[0].BootOrder = ptrTo(uint(validation.MaxBootOrder))
		}},
		{name: "bootindex past MaxBootOrder", mod: func(_ testing.TB, _ env, in *Input) {
			in.VMI.Spec.Domain.Devices.Disks[0].BootOrder = ptrTo(uint(validation.MaxBootOrder))
		}, edit: func(argv []string) []string {
			return replaceIn(argv, fmt.Sprintf("bootindex=%d", validation.MaxBootOrder), fmt.Sprintf("bootindex=%d", validation.MaxBootOrder+1))
		}, refuse: "expects int32"},
		{name: "UUID in braces", mod: func(_ testing.TB, _ env, in *Input) {
			in.VMI.Spec.Domain.Firmware = &v1.Firmware{UUID: "{6ba7b810-9dad-11d1-80b4-00c04fd430c8}"}
		}, refuse: "failed to parse UUID"},
		{name: "256 vCPUs on pc", mod: func(_ testing.TB, _ env, in *Input) {
			in.VMI.Spec.Domain.Machine.Type = "pc"
			in.VMI.Spec.Domain.CPU = &v1.CPU{Sockets: 256, Cores: 1, Threads: 1}
			in.VMI.Spec.Domain.Devices.Disks = in.VMI.Spec.Domain.Devices.Disks[:1]
		}, refuse: "The max CPUs supported by machine '" + machines.Resolve("pc") + "' is 255"},
		{name: "machine type newer than QEMU", mod: func(_ testing.TB, _ env, in *Input) {
			in.VMI.Spec.Domain.Machine.Type = newer
		}, refuse: "unsupported machine type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newQemuEnv(t, art)
			in := pciCase.input(t, e)
			tc.mod(t, e, &in)
			argv, err := Build(in)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			if tc.edit != nil {
				argv = tc.edit(argv)
			}
			v := startQEMU(t, argv, e.extra)
			if tc.refuse != "" {
				select {
				case <-v.exited:
				case <-time.After(stepTimeout):
					t.Fatalf("QEMU still runs after %s; want it to refuse with %q", stepTimeout, tc.refuse)
				}
				if v.err == nil || !strings.Contains(v.out.String(), tc.refuse) {
					t.Fatalf("QEMU: %v, output %q; want %q", v.err, v.out.String(), tc.refuse)
				}
				t.Logf("QEMU refuses: %s", strings.TrimSpace(v.out.String()))
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
			defer cancel()
			go func() {
				select {
				case <-v.exited:
					cancel()
				case <-ctx.Done():
				}
			}()
			mon, err := qmp.Dial(ctx, in.Paths.QMP)
			if err != nil {
				t.Fatalf("QMP: %v (QEMU: %s)", err, v.state())
			}
			defer mon.Close()
			wantStatus(ctx, t, mon, "prelaunch")
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

// newerQ35 is pc-q35-<N+1>.0 for the newest pc-q35-<N>.<M> QEMU has; Build
// with the detected machine types refuses it before QEMU would.
func newerQ35(t *testing.T, machines Machines) string {
	t.Helper()
	newest := -1
	for name := range machines {
		var major, minor int
		if _, err := fmt.Sscanf(name, "pc-q35-%d.%d", &major, &minor); err == nil && major > newest {
			newest = major
		}
	}
	if newest < 0 || machines.Resolve("pc") == "" {
		t.Fatalf("-machine help: no pc-q35-X.Y or no pc alias in %v", machines)
	}
	newer := fmt.Sprintf("pc-q35-%d.0", newest+1)
	in := baseInput(t, baseYAML)
	in.VMI.Spec.Domain.Machine.Type = newer
	in.Facts.Machines = machines
	if _, err := Build(in); err == nil || !strings.Contains(err.Error(), "spec.domain.machine.type") {
		t.Fatalf("Build with this QEMU's machine types, machine %s: %v; want refused", newer, err)
	}
	return newer
}

// replaceIn replaces old with new in every argument.
func replaceIn(argv []string, old, new string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = strings.ReplaceAll(a, old, new)
	}
	return out
}
