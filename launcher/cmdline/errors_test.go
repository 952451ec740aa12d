package cmdline

import (
	"fmt"
	"strings"
	"testing"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

const baseYAML = `
apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata:
  name: err
spec:
  domain:
    memory:
      guest: 128Mi
    devices:
      autoattachPodInterface: false
      disks:
      - name: root
  volumes:
  - name: root
    containerDisk:
      image: example.com/disk:1
`

// baseInput is a VMI with one virtio disk and its drive.
func baseInput(t *testing.T, yaml string) Input {
	t.Helper()
	e := newGoldenEnv()
	in := Input{VMI: mustVMI(t, yaml), Facts: e.facts(AccelTCG), Paths: e.paths(),
		Drives: map[string]Drive{"root": {Path: "/run/kemu/root.qcow2", Format: FormatQCOW2}}}
	if fw := in.VMI.Spec.Domain.Firmware; fw != nil && fw.KernelBoot != nil {
		in.Kernel = e.kernel(t)
	}
	return in
}

func sataYAML(n int) string {
	var disks, vols strings.Builder
	for i := range n {
		fmt.Fprintf(&disks, "      - name: d%d\n        disk:\n          bus: sata\n", i)
		fmt.Fprintf(&vols, "  - name: d%d\n    emptyDisk:\n      capacity: 1Mi\n", i)
	}
	return `
apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata:
  name: sata
spec:
  domain:
    memory:
      guest: 128Mi
    devices:
      autoattachPodInterface: false
      disks:
` + disks.String() + "  volumes:\n" + vols.String()
}

const kernelYAML = `
apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata:
  name: kb
spec:
  domain:
    memory:
      guest: 128Mi
    firmware:
      kernelBoot:
        kernelArgs: console=ttyS0
        container:
          image: example.com/kernel:1
          kernelPath: /boot/vmlinuz
    devices:
      autoattachPodInterface: false
`

const netYAML = `
apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata:
  name: net
spec:
  domain:
    memory:
      guest: 128Mi
    devices:
      interfaces:
      - name: default
        model: e1000
        bridge: {}
  networks:
  - name: default
    pod: {}
`

func TestBuildErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		mod  func(in *Input)
		want string // the error starts with this (the field), then has the rest
		rest string
	}{
		{name: "nil VMI", yaml: baseYAML, mod: func(in *Input) { in.VMI = nil }, want: "Input.VMI"},
		{name: "missing drive", yaml: baseYAML, mod: func(in *Input) { delete(in.Drives, "root") },
			want: "spec.domain.devices.disks[0].name", rest: `no prepared drive for volume "root"`},
		{name: "bad format", yaml: baseYAML, mod: func(in *Input) { in.Drives["root"] = Drive{Path: "/x", Format: "vmdk"} },
			want: `Input.Drives["root"].Format`},
		// Validation refuses a 7th SATA disk (and the shared name below);
		// Build refuses it too when handed an unvalidated VMI.
		{name: "7 sata", yaml: sataYAML(6), mod: func(in *Input) {
			d := &in.VMI.Spec.Domain.Devices
			d.Disks = append(d.Disks, d.Disks[5])
			d.Disks[6].Name = "d6"
			for i := range 7 {
				in.Drives[fmt.Sprintf("d%d", i)] = Drive{Path: fmt.Sprintf("/d%d", i), Format: FormatRaw}
			}
		}, want: "spec.domain.devices.disks[6]", rest: "more than 6 SATA"},
		{name: "read-only sata disk", yaml: sataYAML(1), mod: func(in *Input) {
			in.Drives["d0"] = Drive{Path: "/d0", Format: FormatRaw}
			in.VMI.Spec.Domain.Devices.Disks[0].Disk.ReadOnly = true
		}, want: "spec.domain.devices.disks[0].disk.readonly", rest: "SATA"},
		{name: "read-only claim on sata", yaml: sataYAML(1), mod: func(in *Input) {
			in.Drives["d0"] = Drive{Path: "/d0", Format: FormatRaw, ReadOnly: true}
		}, want: `Input.Drives["d0"].ReadOnly`},
		// A lun is a SCSI device: a block device, raw. Validation cannot
		// know the claim's mode; launcher/storage refuses it first.
		{name: "lun on a file", yaml: baseYAML, mod: func(in *Input) {
			in.VMI.Spec.Domain.Devices.Disks[0] = v1.Disk{Name: "root", LUN: &v1.LunTarget{Bus: v1.DiskBusSCSI}}
			in.Drives["root"] = Drive{Path: "/run/kemu/pvc/root/disk.img", Format: FormatRaw}
		}, want: "spec.domain.devices.disks[0].lun", rest: "not a block device"},
		{name: "lun on sata", yaml: baseYAML, mod: func(in *Input) {
			in.VMI.Spec.Domain.Devices.Disks[0] = v1.Disk{Name: "root", LUN: &v1.LunTarget{Bus: v1.DiskBusSATA}}
			in.Drives["root"] = Drive{Path: "/dev/sdb", Format: FormatRaw, Block: true}
		}, want: "spec.domain.devices.disks[0].lun.bus", rest: "only on scsi"},
		{name: "secure boot without firmware", yaml: strings.Replace(baseYAML, "    devices:", "    firmware:\n      bootloader:\n        efi: {}\n    devices:", 1),
			mod: func(in *Input) {
				in.Facts.OVMF.SecureCode, in.Facts.OVMF.SecureVars = "", ""
				in.Paths.EFIVars = "/run/kemu/vars.fd"
			}, want: "spec.domain.firmware.bootloader.efi.secureBoot", rest: "Secure Boot"},
		{name: "efi without firmware", yaml: strings.Replace(baseYAML, "    devices:", "    firmware:\n      bootloader:\n        efi:\n          secureBoot: false\n    devices:", 1),
			mod: func(in *Input) {
				in.Facts.OVMF = OVMF{}
				in.Paths.EFIVars = "/run/kemu/vars.fd"
			}, want: "spec.domain.firmware.bootloader.efi:", rest: "OVMF"},
		{name: "smm off with secure boot", yaml: strings.Replace(baseYAML, "    devices:", "    firmware:\n      bootloader:\n        efi: {}\n    devices:", 1),
			mod: func(in *Input) {
				off := false
				in.VMI.Spec.Domain.Features.SMM = &v1.FeatureState{Enabled: &off}
				in.Paths.EFIVars = "/run/kemu/vars.fd"
			}, want: "spec.domain.features.smm.enabled", rest: "Secure Boot needs SMM"},
		{name: "efi without vars copy", yaml: strings.Replace(baseYAML, "    devices:", "    firmware:\n      bootloader:\n        efi: {}\n    devices:", 1),
			want: "Paths.EFIVars"},
		{name: "newline in kernelArgs", yaml: kernelYAML, mod: func(in *Input) {
			in.VMI.Spec.Domain.Firmware.KernelBoot.KernelArgs = "console=ttyS0\ninit=/bin/sh"
		}, want: "spec.domain.firmware.kernelBoot.kernelArgs", rest: "control character (U+000A)"},
		{name: "newline in drive path", yaml: baseYAML, mod: func(in *Input) {
			in.Drives["root"] = Drive{Path: "/run/a\nb", Format: FormatRaw}
		}, want: `Input.Drives["root"].Path`, rest: "control character"},
		{name: "newline in SMBIOS serial", yaml: baseYAML, mod: func(in *Input) {
			in.VMI.Spec.Domain.Firmware.Serial = "a\nb"
		}, want: "spec.domain.firmware.serial"},
		{name: "newline in disk serial", yaml: baseYAML, mod: func(in *Input) {
			in.VMI.Spec.Domain.Devices.Disks[0].Serial = "a\nb"
		}, want: "spec.domain.devices.disks[0].serial"},
		{name: "NUL in socket path", yaml: baseYAML, mod: func(in *Input) { in.Paths.Serial = "/run/\x00" }, want: "Paths.Serial"},
		{name: "long socket path", yaml: baseYAML, mod: func(in *Input) { in.Paths.QMP = "/" + strings.Repeat("x", 107) },
			want: "Paths.QMP", rest: "at most 107"},
		{name: "no QMP socket", yaml: baseYAML, mod: func(in *Input) { in.Paths.QMP = "" }, want: "Paths.QMP"},
		{name: "QMP fd not inherited", yaml: baseYAML, mod: func(in *Input) { in.Paths.QMP, in.Paths.QMPFD = "", 2 }, want: "Paths.QMP",
			rest: "fd 2 is not an inherited one"},
		{name: "no VNC socket with graphics", yaml: baseYAML, mod: func(in *Input) { in.Paths.VNC = "" }, want: "Paths.VNC",
			rest: "autoattachGraphicsDevice"},
		{name: "long VNC socket path", yaml: baseYAML, mod: func(in *Input) { in.Paths.VNC = "/" + strings.Repeat("v", 107) },
			want: "Paths.VNC", rest: "at most 107"},
		{name: "TPM without runtime directory", yaml: baseYAML, mod: func(in *Input) {
			in.VMI.Spec.Domain.Devices.TPM = &v1.TPMDevice{}
			in.Paths.Dir = ""
		}, want: "Paths.Dir", rest: "TPM"},
		{name: "long TPM socket path", yaml: baseYAML, mod: func(in *Input) {
			in.VMI.Spec.Domain.Devices.TPM = &v1.TPMDevice{}
			in.Paths.Dir = "/" + strings.Repeat("t", 100)
		}, want: "spec.domain.devices.tpm", rest: "at most 107"},
		{name: "no serial socket", yaml: baseYAML, mod: func(in *Input) { in.Paths.Serial = "" }, want: "Paths.Serial"},
		{name: "bad accel", yaml: baseYAML, mod: func(in *Input) { in.Facts.Accel = "hvf" }, want: "Facts.Accel"},
		{name: "cpu model help", yaml: baseYAML, mod: func(in *Input) { in.VMI.Spec.Domain.CPU.Model = "help" },
			want: "spec.domain.cpu.model"},
		{name: "cpu model with comma", yaml: baseYAML, mod: func(in *Input) { in.VMI.Spec.Domain.CPU.Model = "max,+vmx" },
			want: "spec.domain.cpu.model"},
		{name: "not defaulted", yaml: baseYAML, mod: func(in *Input) { in.VMI.Spec.Domain.Memory = nil },
			want: "spec.domain.memory.guest", rest: "defaulted"},
		{name: "kernel input missing", yaml: kernelYAML, mod: func(in *Input) { in.Kernel = nil }, want: "Input.Kernel"},
		{name: "kernel input without kernelBoot", yaml: baseYAML, mod: func(in *Input) { in.Kernel = &KernelBoot{Kernel: "/k"} },
			want: "Input.Kernel"},
		{name: "NIC count", yaml: netYAML, want: "Input.NICs", rest: "0 NICs for 1 interfaces"},
		{name: "NIC name", yaml: netYAML, mod: func(in *Input) { in.NICs = []NIC{{Name: "other", TapFDs: []int{3}}} },
			want: "Input.NICs[0].Name"},
		{name: "NIC without backend", yaml: netYAML, mod: func(in *Input) { in.NICs = []NIC{{Name: "default"}} },
			want: "Input.NICs[0]", rest: "neither"},
		{name: "bad MTU", yaml: netYAML, mod: func(in *Input) { in.NICs = []NIC{{Name: "default", TapFDs: []int{3}, MTU: 20}} },
			want: "Input.NICs[0].MTU", rest: "is not an MTU"},
		{name: "multiqueue e1000", yaml: netYAML, mod: func(in *Input) { in.NICs = []NIC{{Name: "default", TapFDs: []int{3, 4}}} },
			want: "Input.NICs[0].TapFDs", rest: "multiqueue needs model virtio"},
		{name: "vhost fds without vhost-net", yaml: netYAML, mod: func(in *Input) {
			in.Facts.VhostNet = false
			in.NICs = []NIC{{Name: "default", Model: "virtio", TapFDs: []int{3}, VhostFDs: []int{4}}}
		}, want: "Input.NICs[0].VhostFDs"},
		{name: "stdio as tap fd", yaml: netYAML, mod: func(in *Input) { in.NICs = []NIC{{Name: "default", TapFDs: []int{1}}} },
			want: "Input.NICs[0]", rest: "fd 1"},
		{name: "passt and tap", yaml: netYAML, mod: func(in *Input) { in.NICs = []NIC{{Name: "default", PasstFD: 3, TapFDs: []int{4}}} },
			want: "Input.NICs[0].PasstFD", rest: "with TapFDs or User"},
		{name: "passt and vhost", yaml: netYAML, mod: func(in *Input) {
			in.Facts.VhostNet = true
			in.NICs = []NIC{{Name: "default", Model: "virtio", PasstFD: 3, VhostFDs: []int{4}}}
		}, want: "Input.NICs[0].VhostFDs", rest: "needs a tap"},
		{name: "stdio as passt fd", yaml: netYAML, mod: func(in *Input) { in.NICs = []NIC{{Name: "default", PasstFD: 2}} },
			want: "Input.NICs[0]", rest: "inherited fds start at 3"},
		{name: "bad MAC", yaml: netYAML, mod: func(in *Input) { in.NICs = []NIC{{Name: "default", MAC: "02:00", TapFDs: []int{3}}} },
			want: "Input.NICs[0].MAC"},
		{name: "user net not IPv4", yaml: netYAML, mod: func(in *Input) {
			in.NICs = []NIC{{Name: "default", User: &UserNet{Net: "fd00::/64"}}}
		}, want: "Input.NICs[0].User"},
		{name: "forward protocol", yaml: netYAML, mod: func(in *Input) {
			in.NICs = []NIC{{Name: "default", User: &UserNet{Forwards: []Forward{{Proto: "sctp", HostPort: 1, GuestPort: 1}}}}}
		}, want: "Input.NICs[0].User", rest: "sctp"},
		{name: "disk and interface share a name", yaml: strings.ReplaceAll(netYAML, "      interfaces:", `      disks:
      - name: disk
      interfaces:`) + "  volumes:\n  - name: disk\n    emptyDisk:\n      capacity: 1Mi\n",
			mod: func(in *Input) {
				in.VMI.Spec.Domain.Devices.Disks[0].Name = "default"
				in.Drives["default"] = Drive{Path: "/d", Format: FormatRaw}
				in.NICs = []NIC{{Name: "default", TapFDs: []int{3}}}
			}, want: "spec.domain.devices.interfaces[0].name", rest: `"ua-default"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(t, tc.yaml)
			if tc.mod != nil {
				tc.mod(&in)
			}
			argv, err := Build(in)
			if err == nil {
				t.Fatalf("Build succeeded: %q", argv)
			}
			if !strings.HasPrefix(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.rest) {
				t.Fatalf("error %q\nwant it to start with %q and contain %q", err, tc.want, tc.rest)
			}
			t.Log(err)
		})
	}
}

func TestBaseInputBuilds(t *testing.T) {
	for _, y := range []string{baseYAML, sataYAML(6), kernelYAML} {
		if _, err := Build(baseInputWithDrives(t, y)); err != nil {
			t.Errorf("Build: %v", err)
		}
	}
}

func baseInputWithDrives(t *testing.T, yaml string) Input {
	in := baseInput(t, yaml)
	for _, d := range in.VMI.Spec.Domain.Devices.Disks {
		if _, ok := in.Drives[d.Name]; !ok {
			in.Drives[d.Name] = Drive{Path: "/" + d.Name, Format: FormatRaw}
		}
	}
	return in
}

func TestNodeName(t *testing.T) {
	long := strings.Repeat("a", 63)
	for _, name := range []string{"a", "root", strings.Repeat("b", 25), strings.Repeat("c", 26), long, long[:62] + "b"} {
		for _, n := range []string{NodeName(name), FileNodeName(name)} {
			if len(n) > MaxNodeName || !idPattern.MatchString(n) {
				t.Errorf("node name %q for %q: not a valid QEMU node name", n, name)
			}
		}
	}
	if NodeName("root") != "drive-root" || FileNodeName("root") != "file-root" {
		t.Errorf("short names are not kept: %s, %s", NodeName("root"), FileNodeName("root"))
	}
	if NodeName(long) == NodeName(long[:62]+"b") {
		t.Errorf("two long names share node name %s", NodeName(long))
	}
}

func TestMemoryRounding(t *testing.T) {
	for guest, want := range map[string]string{"128Mi": "128", "1G": "953", "1Gi": "1024", "100000000": "95", "33554433": "32"} {
		in := baseInput(t, strings.Replace(baseYAML, "guest: 128Mi", "guest: \""+guest+"\"", 1))
		argv, err := Build(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := argAfter(argv, "-m"); got != want {
			t.Errorf("memory.guest %s: -m %s, want %s", guest, got, want)
		}
	}
}

func TestCPUModel(t *testing.T) {
	for _, tc := range []struct{ model, accel, want string }{
		{"host-passthrough", AccelKVM, "host"},
		{"host-model", AccelKVM, "host"},
		{"host-model", AccelTCG, "max"},
		{"Skylake-Client", AccelKVM, "Skylake-Client"},
		{"qemu64", AccelTCG, "qemu64"},
	} {
		in := baseInput(t, baseYAML)
		in.VMI.Spec.Domain.CPU.Model = tc.model
		in.Facts.Accel = tc.accel
		argv, err := Build(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := argAfter(argv, "-cpu"); got != tc.want {
			t.Errorf("%s under %s: -cpu %s, want %s", tc.model, tc.accel, got, tc.want)
		}
	}
}

func argAfter(argv []string, flag string) string {
	for i, a := range argv {
		if a == flag && i+1 < len(argv) {
			return argv[i+1]
		}
	}
	return ""
}

// Build never panics and never passes on an argument with a control
// character, whatever strings the VMI and inputs hold.
func FuzzBuildStrings(f *testing.F) {
	f.Add("SN,1", "/a,b", "console=ttyS0")
	f.Add("a\nb", "/x\x00", "\t")
	f.Fuzz(func(t *testing.T, serial, path, args string) {
		in := baseInput(t, kernelYAML)
		in.Kernel = &KernelBoot{Kernel: path, Initrd: path}
		in.VMI.Spec.Domain.Firmware.Serial = serial
		in.VMI.Spec.Domain.Firmware.KernelBoot.KernelArgs = args
		in.Paths.GuestAgent = path
		argv, err := Build(in)
		if err != nil {
			return
		}
		for _, a := range argv {
			if CheckArg(a) != nil {
				t.Fatalf("argument %q passed", a)
			}
		}
	})
}
