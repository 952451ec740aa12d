// Package validation checks kemu.dev/v1alpha1 objects after defaulting. Every
// component (kemuctl, controller, node agent, launcher) uses it, so a VMI is
// judged the same way everywhere. Errors carry field paths as
// k8s.io/apimachinery's field.ErrorList.
package validation

import (
	"encoding/base64"
	"fmt"
	"net"
	"path"
	"regexp"
	"strings"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// Limits kemu enforces.
var (
	// MinGuestMemory is the smallest guest kemu boots.
	MinGuestMemory = resource.MustParse("32Mi")
	// MaxVCPUs is the largest sockets*cores*threads.
	MaxVCPUs uint32 = 288
)

var (
	serialPattern   = regexp.MustCompile(`^[A-Za-z0-9_.+-]+$`)
	cpuModelPattern = regexp.MustCompile(`^[A-Za-z0-9_.+-]+$`)
	q35Pattern      = regexp.MustCompile(`^(q35|pc-q35-[0-9]+\.[0-9]+)$`)
	i440fxPattern   = regexp.MustCompile(`^(pc|pc-i440fx-[0-9]+\.[0-9]+)$`)
	pullPolicies    = []string{string(corev1.PullAlways), string(corev1.PullIfNotPresent), string(corev1.PullNever)}
)

// ValidateVirtualMachineInstance validates a defaulted VMI.
func ValidateVirtualMachineInstance(vmi *v1.VirtualMachineInstance) field.ErrorList {
	allErrs := Unsupported(vmi, nil)
	allErrs = append(allErrs, ValidateVirtualMachineInstanceSpec(&vmi.Spec, field.NewPath("spec"))...)
	return allErrs
}

// ValidateVirtualMachine validates a defaulted VM.
func ValidateVirtualMachine(vm *v1.VirtualMachine) field.ErrorList {
	allErrs := Unsupported(vm, nil)
	spec := field.NewPath("spec")
	if vm.Spec.Running != nil && vm.Spec.RunStrategy != nil {
		allErrs = append(allErrs, field.Invalid(spec.Child("running"), *vm.Spec.Running,
			"running and runStrategy are mutually exclusive; use runStrategy"))
	}
	if rs := vm.Spec.RunStrategy; rs != nil {
		allErrs = append(allErrs, oneOf(spec.Child("runStrategy"), string(*rs),
			string(v1.RunStrategyAlways), string(v1.RunStrategyHalted), string(v1.RunStrategyManual),
			string(v1.RunStrategyRerunOnFailure), string(v1.RunStrategyOnce))...)
	}
	if vm.Spec.Template == nil {
		allErrs = append(allErrs, field.Required(spec.Child("template"), "a VM needs a VMI template"))
	} else {
		allErrs = append(allErrs, ValidateVirtualMachineInstanceSpec(&vm.Spec.Template.Spec, spec.Child("template", "spec"))...)
	}
	return allErrs
}

// ValidateVirtualMachineInstanceMigration validates a migration request.
func ValidateVirtualMachineInstanceMigration(m *v1.VirtualMachineInstanceMigration) field.ErrorList {
	allErrs := Unsupported(m, nil)
	p := field.NewPath("spec", "vmiName")
	if m.Spec.VMIName == "" {
		allErrs = append(allErrs, field.Required(p, "the VMI to migrate"))
	} else {
		allErrs = append(allErrs, dnsSubdomain(p, m.Spec.VMIName)...)
	}
	return allErrs
}

// ValidateVirtualMachineInstanceSpec validates a defaulted VMI spec at fldPath.
func ValidateVirtualMachineInstanceSpec(spec *v1.VirtualMachineInstanceSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	allErrs = append(allErrs, validateDomain(&spec.Domain, fldPath.Child("domain"))...)
	allErrs = append(allErrs, validateVolumes(spec, fldPath)...)
	allErrs = append(allErrs, validateNetworks(spec, fldPath)...)

	if g := spec.TerminationGracePeriodSeconds; g != nil && *g < 0 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("terminationGracePeriodSeconds"), *g, "must be 0 or more"))
	}
	if s := spec.EvictionStrategy; s != nil {
		allErrs = append(allErrs, oneOf(fldPath.Child("evictionStrategy"), string(*s),
			string(v1.EvictionStrategyNone), string(v1.EvictionStrategyLiveMigrate),
			string(v1.EvictionStrategyLiveMigrateIfPossible), string(v1.EvictionStrategyExternal))...)
	}
	if s := spec.StartStrategy; s != nil {
		allErrs = append(allErrs, oneOf(fldPath.Child("startStrategy"), string(*s), string(v1.StartStrategyPaused))...)
	}
	allErrs = append(allErrs, metavalidation.ValidateLabels(spec.NodeSelector, fldPath.Child("nodeSelector"))...)
	return allErrs
}

func validateDomain(d *v1.DomainSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	allErrs = append(allErrs, validateResources(d, fldPath)...)

	if d.CPU != nil {
		p := fldPath.Child("cpu")
		if n := uint64(d.CPU.Sockets) * uint64(d.CPU.Cores) * uint64(d.CPU.Threads); n > uint64(MaxVCPUs) {
			allErrs = append(allErrs, field.Invalid(p, n, fmt.Sprintf("sockets*cores*threads must be at most %d", MaxVCPUs)))
		}
		for name, n := range map[string]uint32{"sockets": d.CPU.Sockets, "cores": d.CPU.Cores, "threads": d.CPU.Threads} {
			if n == 0 {
				allErrs = append(allErrs, field.Invalid(p.Child(name), n, "must be at least 1"))
			}
		}
		if m := d.CPU.Model; m != "" && !cpuModelPattern.MatchString(m) {
			allErrs = append(allErrs, field.Invalid(p.Child("model"), m,
				"must be host-passthrough, host-model or a QEMU CPU model name"))
		}
	}

	machine := ""
	if d.Machine != nil {
		machine = d.Machine.Type
	}
	if machine == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("machine", "type"), "defaulting sets q35"))
	} else if !q35Pattern.MatchString(machine) && !i440fxPattern.MatchString(machine) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("machine", "type"), machine,
			[]string{"q35", "pc-q35-X.Y", "pc", "pc-i440fx-X.Y"}))
	}

	if d.Firmware != nil {
		allErrs = append(allErrs, validateFirmware(d.Firmware, fldPath.Child("firmware"))...)
	}

	devs := fldPath.Child("devices")
	seen := sets.New[string]()
	boot := map[uint]string{}
	for i, disk := range d.Devices.Disks {
		p := devs.Child("disks").Index(i)
		allErrs = append(allErrs, dnsLabel(p.Child("name"), disk.Name)...)
		if seen.Has(disk.Name) {
			allErrs = append(allErrs, field.Duplicate(p.Child("name"), disk.Name))
		}
		seen.Insert(disk.Name)
		allErrs = append(allErrs, validateDiskTarget(&disk, machine, p)...)
		if bo := disk.BootOrder; bo != nil {
			if *bo < 1 {
				allErrs = append(allErrs, field.Invalid(p.Child("bootOrder"), *bo, "must be 1 or more"))
			} else if other, dup := boot[*bo]; dup {
				allErrs = append(allErrs, field.Invalid(p.Child("bootOrder"), *bo, fmt.Sprintf("already used by disk %q", other)))
			} else {
				boot[*bo] = disk.Name
			}
		}
		if s := disk.Serial; s != "" && (!serialPattern.MatchString(s) || len(s) > 20) {
			allErrs = append(allErrs, field.Invalid(p.Child("serial"), s,
				"must be at most 20 characters of A-Z, a-z, 0-9, '_', '.', '+', '-'"))
		}
	}
	return allErrs
}

func validateResources(d *v1.DomainSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	res := fldPath.Child("resources")
	for name, req := range d.Resources.Requests {
		if req.Sign() < 0 {
			allErrs = append(allErrs, field.Invalid(res.Child("requests").Key(string(name)), req.String(), "must not be negative"))
		}
		if lim, ok := d.Resources.Limits[name]; ok && req.Cmp(lim) > 0 {
			allErrs = append(allErrs, field.Invalid(res.Child("requests").Key(string(name)), req.String(),
				fmt.Sprintf("must not exceed limits.%s (%s)", name, lim.String())))
		}
	}
	guestPath := fldPath.Child("memory", "guest")
	var guest *resource.Quantity
	if d.Memory != nil {
		guest = d.Memory.Guest
	}
	switch {
	case guest == nil:
		allErrs = append(allErrs, field.Required(guestPath, "set memory.guest or resources.requests.memory"))
	case guest.Cmp(MinGuestMemory) < 0:
		allErrs = append(allErrs, field.Invalid(guestPath, guest.String(), "must be at least "+MinGuestMemory.String()))
	default:
		if lim, ok := d.Resources.Limits[corev1.ResourceMemory]; ok && guest.Cmp(lim) > 0 {
			allErrs = append(allErrs, field.Invalid(guestPath, guest.String(),
				fmt.Sprintf("must not exceed resources.limits.memory (%s)", lim.String())))
		}
	}
	return allErrs
}

func validateFirmware(fw *v1.Firmware, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if fw.UUID != "" {
		if _, err := uuid.Parse(string(fw.UUID)); err != nil {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("uuid"), fw.UUID, "must be a UUID"))
		}
	}
	if s := fw.Serial; s != "" {
		if len(s) > 256 || strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0 {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("serial"), s, "must be at most 256 printable ASCII characters"))
		}
	}
	if b := fw.Bootloader; b != nil && b.BIOS != nil && b.EFI != nil {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("bootloader"), "bios, efi", "bios and efi are mutually exclusive"))
	}
	if kb := fw.KernelBoot; kb != nil {
		p := fldPath.Child("kernelBoot")
		c := kb.Container
		switch {
		case c == nil:
			allErrs = append(allErrs, field.Required(p.Child("container"), "kernelBoot needs a container with the kernel or initrd"))
		default:
			cp := p.Child("container")
			if c.Image == "" {
				allErrs = append(allErrs, field.Required(cp.Child("image"), ""))
			}
			if c.KernelPath == "" && c.InitrdPath == "" {
				allErrs = append(allErrs, field.Required(cp, "kernelPath or initrdPath must be set"))
			}
			allErrs = append(allErrs, absPath(cp.Child("kernelPath"), c.KernelPath)...)
			allErrs = append(allErrs, absPath(cp.Child("initrdPath"), c.InitrdPath)...)
			if c.ImagePullPolicy != "" {
				allErrs = append(allErrs, oneOf(cp.Child("imagePullPolicy"), string(c.ImagePullPolicy), pullPolicies...)...)
			}
		}
		if kb.KernelArgs != "" && (c == nil || c.KernelPath == "") {
			allErrs = append(allErrs, field.Invalid(p.Child("kernelArgs"), kb.KernelArgs, "kernelArgs needs container.kernelPath"))
		}
	}
	return allErrs
}

func validateDiskTarget(disk *v1.Disk, machine string, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	n := 0
	for _, set := range []bool{disk.Disk != nil, disk.CDRom != nil, disk.LUN != nil} {
		if set {
			n++
		}
	}
	if n > 1 {
		allErrs = append(allErrs, field.Invalid(p, disk.Name, "a disk is one of disk, cdrom or lun"))
	}
	hasSATA := !i440fxPattern.MatchString(machine)
	busOK := func(bp *field.Path, bus v1.DiskBus, cdrom bool) {
		switch bus {
		case v1.DiskBusVirtio:
			if cdrom {
				allErrs = append(allErrs, field.NotSupported(bp, bus, []string{string(v1.DiskBusSATA), string(v1.DiskBusSCSI)}))
			}
		case v1.DiskBusSATA:
			if !hasSATA {
				allErrs = append(allErrs, field.Invalid(bp, bus, fmt.Sprintf("machine type %q has no SATA controller; use q35", machine)))
			}
		case v1.DiskBusSCSI:
		default:
			allErrs = append(allErrs, field.NotSupported(bp, bus,
				[]string{string(v1.DiskBusVirtio), string(v1.DiskBusSATA), string(v1.DiskBusSCSI)}))
		}
	}
	if disk.Disk != nil {
		busOK(p.Child("disk", "bus"), disk.Disk.Bus, false)
	}
	if cd := disk.CDRom; cd != nil {
		busOK(p.Child("cdrom", "bus"), cd.Bus, true)
		if cd.ReadOnly != nil && !*cd.ReadOnly {
			allErrs = append(allErrs, field.Invalid(p.Child("cdrom", "readonly"), false, "a CD-ROM is read-only"))
		}
	}
	return allErrs
}

func validateVolumes(spec *v1.VirtualMachineInstanceSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	vols := fldPath.Child("volumes")
	names := sets.New[string]()
	cloudInits := 0
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		p := vols.Index(i)
		allErrs = append(allErrs, dnsLabel(p.Child("name"), v.Name)...)
		if names.Has(v.Name) {
			allErrs = append(allErrs, field.Duplicate(p.Child("name"), v.Name))
		}
		names.Insert(v.Name)

		sources := volumeSources(v)
		switch {
		case len(sources) == 0:
			allErrs = append(allErrs, field.Required(p, "a volume needs one source: containerDisk, cloudInitNoCloud, emptyDisk, hostDisk or persistentVolumeClaim"))
		case len(sources) > 1:
			allErrs = append(allErrs, field.Invalid(p, strings.Join(sources, ", "), "a volume has exactly one source"))
		}

		if cd := v.ContainerDisk; cd != nil {
			cp := p.Child("containerDisk")
			if cd.Image == "" {
				allErrs = append(allErrs, field.Required(cp.Child("image"), ""))
			}
			allErrs = append(allErrs, absPath(cp.Child("path"), cd.Path)...)
			if cd.ImagePullPolicy != "" {
				allErrs = append(allErrs, oneOf(cp.Child("imagePullPolicy"), string(cd.ImagePullPolicy), pullPolicies...)...)
			}
		}
		if ci := v.CloudInitNoCloud; ci != nil {
			cloudInits++
			if cloudInits > 1 {
				allErrs = append(allErrs, field.Invalid(p.Child("cloudInitNoCloud"), v.Name, "a VMI has at most one cloud-init volume"))
			}
			allErrs = append(allErrs, validateCloudInit(ci, p.Child("cloudInitNoCloud"))...)
		}
		if ed := v.EmptyDisk; ed != nil && ed.Capacity.Sign() <= 0 {
			allErrs = append(allErrs, field.Invalid(p.Child("emptyDisk", "capacity"), ed.Capacity.String(), "must be greater than 0"))
		}
		if hd := v.HostDisk; hd != nil {
			hp := p.Child("hostDisk")
			if hd.Path == "" {
				allErrs = append(allErrs, field.Required(hp.Child("path"), ""))
			} else {
				allErrs = append(allErrs, absPath(hp.Child("path"), hd.Path)...)
			}
			switch hd.Type {
			case v1.HostDiskExists:
			case v1.HostDiskExistsOrCreate:
				if hd.Capacity == nil {
					allErrs = append(allErrs, field.Required(hp.Child("capacity"), "DiskOrCreate needs the capacity of the disk to create"))
				}
			case "":
				allErrs = append(allErrs, field.Required(hp.Child("type"), "Disk or DiskOrCreate"))
			default:
				allErrs = append(allErrs, field.NotSupported(hp.Child("type"), hd.Type,
					[]string{string(v1.HostDiskExists), string(v1.HostDiskExistsOrCreate)}))
			}
			if hd.Capacity != nil && hd.Capacity.Sign() <= 0 {
				allErrs = append(allErrs, field.Invalid(hp.Child("capacity"), hd.Capacity.String(), "must be greater than 0"))
			}
		}
		if pvc := v.PersistentVolumeClaim; pvc != nil {
			pp := p.Child("persistentVolumeClaim", "claimName")
			if pvc.ClaimName == "" {
				allErrs = append(allErrs, field.Required(pp, ""))
			} else {
				allErrs = append(allErrs, dnsSubdomain(pp, pvc.ClaimName)...)
			}
		}
	}

	// Every disk attaches a volume of its name.
	for i, d := range spec.Domain.Devices.Disks {
		if !names.Has(d.Name) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("domain", "devices", "disks").Index(i).Child("name"),
				d.Name, "no volume with this name"))
		}
	}
	return allErrs
}

func volumeSources(v *v1.Volume) []string {
	var s []string
	add := func(set bool, name string) {
		if set {
			s = append(s, name)
		}
	}
	add(v.ContainerDisk != nil, "containerDisk")
	add(v.CloudInitNoCloud != nil, "cloudInitNoCloud")
	add(v.EmptyDisk != nil, "emptyDisk")
	add(v.HostDisk != nil, "hostDisk")
	add(v.PersistentVolumeClaim != nil, "persistentVolumeClaim")
	// Unsupported sources are reported by Unsupported; counted here so a
	// volume with one of them is not also told it has no source.
	for _, u := range []struct {
		set  bool
		name string
	}{
		{v.DataVolume != nil, "dataVolume"}, {v.CloudInitConfigDrive != nil, "cloudInitConfigDrive"},
		{v.Sysprep != nil, "sysprep"}, {v.Ephemeral != nil, "ephemeral"}, {v.ConfigMap != nil, "configMap"},
		{v.Secret != nil, "secret"}, {v.ServiceAccount != nil, "serviceAccount"}, {v.DownwardAPI != nil, "downwardAPI"},
		{v.DownwardMetrics != nil, "downwardMetrics"}, {v.MemoryDump != nil, "memoryDump"},
	} {
		add(u.set, u.name)
	}
	return s
}

func validateCloudInit(ci *v1.CloudInitNoCloudSource, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	userSources := 0
	for _, set := range []bool{ci.UserData != "", ci.UserDataBase64 != "", ci.SecretRef != nil} {
		if set {
			userSources++
		}
	}
	if userSources > 1 {
		allErrs = append(allErrs, field.Invalid(p, "userData, userDataBase64, secretRef", "set only one of userData, userDataBase64 and secretRef"))
	}
	if userSources == 0 && ci.NetworkData == "" && ci.NetworkDataBase64 == "" {
		allErrs = append(allErrs, field.Required(p.Child("userData"), "cloudInitNoCloud needs user data or network data"))
	}
	if ci.NetworkData != "" && ci.NetworkDataBase64 != "" {
		allErrs = append(allErrs, field.Invalid(p, "networkData, networkDataBase64", "set only one of networkData and networkDataBase64"))
	}
	for name, val := range map[string]string{"userDataBase64": ci.UserDataBase64, "networkDataBase64": ci.NetworkDataBase64} {
		if val == "" {
			continue
		}
		if _, err := base64.StdEncoding.DecodeString(val); err != nil {
			allErrs = append(allErrs, field.Invalid(p.Child(name), "<base64>", "not valid base64: "+err.Error()))
		}
	}
	if ci.SecretRef != nil && ci.SecretRef.Name == "" {
		allErrs = append(allErrs, field.Required(p.Child("secretRef", "name"), ""))
	}
	return allErrs
}

func validateNetworks(spec *v1.VirtualMachineInstanceSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	nets := map[string]*v1.Network{}
	podNets := 0
	for i := range spec.Networks {
		n := &spec.Networks[i]
		p := fldPath.Child("networks").Index(i)
		allErrs = append(allErrs, dnsLabel(p.Child("name"), n.Name)...)
		if _, dup := nets[n.Name]; dup {
			allErrs = append(allErrs, field.Duplicate(p.Child("name"), n.Name))
		}
		nets[n.Name] = n
		switch {
		case n.Pod != nil:
			podNets++
			if podNets > 1 {
				allErrs = append(allErrs, field.Invalid(p.Child("pod"), n.Name, "a VMI has at most one pod network"))
			}
			if c := n.Pod.VMNetworkCIDR; c != "" {
				allErrs = append(allErrs, validateVMNetworkCIDR(p.Child("pod", "vmNetworkCIDR"), c)...)
			}
		case n.Multus == nil:
			allErrs = append(allErrs, field.Required(p.Child("pod"), "a network needs a source: pod"))
		}
	}

	ifaces := fldPath.Child("domain", "devices", "interfaces")
	used := sets.New[string]()
	for i := range spec.Domain.Devices.Interfaces {
		iface := &spec.Domain.Devices.Interfaces[i]
		p := ifaces.Index(i)
		allErrs = append(allErrs, dnsLabel(p.Child("name"), iface.Name)...)
		if used.Has(iface.Name) {
			allErrs = append(allErrs, field.Duplicate(p.Child("name"), iface.Name))
		}
		used.Insert(iface.Name)
		network, ok := nets[iface.Name]
		if !ok {
			allErrs = append(allErrs, field.Invalid(p.Child("name"), iface.Name, "no network with this name"))
		}
		switch {
		case iface.Bridge != nil && iface.Masquerade != nil:
			allErrs = append(allErrs, field.Invalid(p, iface.Name, "an interface has one binding: masquerade or bridge"))
		case iface.Bridge == nil && iface.Masquerade == nil:
			if iface.Slirp == nil && iface.SRIOV == nil && iface.Macvtap == nil && iface.Passt == nil && iface.Binding == nil {
				allErrs = append(allErrs, field.Required(p.Child("masquerade"), "an interface needs a binding: masquerade or bridge"))
			}
		case iface.Masquerade != nil && ok && network.Pod == nil:
			allErrs = append(allErrs, field.Invalid(p.Child("masquerade"), iface.Name, "masquerade is only for the pod network"))
		}
		if len(iface.Ports) > 0 && iface.Masquerade == nil {
			allErrs = append(allErrs, field.Invalid(p.Child("ports"), len(iface.Ports), "ports are only forwarded with the masquerade binding"))
		}
		if iface.Model != "" {
			allErrs = append(allErrs, oneOf(p.Child("model"), iface.Model, "virtio", "e1000", "e1000e", "rtl8139")...)
		}
		if m := iface.MacAddress; m != "" {
			hw, err := net.ParseMAC(m)
			switch {
			case err != nil || len(hw) != 6:
				allErrs = append(allErrs, field.Invalid(p.Child("macAddress"), m, "must be a 48-bit MAC address like 02:00:00:00:00:01"))
			case hw[0]&1 == 1:
				allErrs = append(allErrs, field.Invalid(p.Child("macAddress"), m, "must be a unicast address"))
			}
		}
		seenPorts := map[string]bool{}
		for j, port := range iface.Ports {
			pp := p.Child("ports").Index(j)
			if port.Port < 1 || port.Port > 65535 {
				allErrs = append(allErrs, field.Invalid(pp.Child("port"), port.Port, "must be between 1 and 65535"))
			}
			proto := port.Protocol
			if proto == "" {
				proto = "TCP"
			}
			allErrs = append(allErrs, oneOf(pp.Child("protocol"), proto, "TCP", "UDP")...)
			key := fmt.Sprintf("%s/%d", proto, port.Port)
			if seenPorts[key] {
				allErrs = append(allErrs, field.Duplicate(pp, key))
			}
			seenPorts[key] = true
		}
	}
	for i, n := range spec.Networks {
		if !used.Has(n.Name) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("networks").Index(i).Child("name"), n.Name, "no interface uses this network"))
		}
	}
	return allErrs
}

func validateVMNetworkCIDR(p *field.Path, cidr string) field.ErrorList {
	ip, ipnet, err := net.ParseCIDR(cidr)
	if err != nil || ip.To4() == nil {
		return field.ErrorList{field.Invalid(p, cidr, "must be an IPv4 CIDR such as 10.0.2.0/24")}
	}
	if ones, _ := ipnet.Mask.Size(); ones > 30 {
		return field.ErrorList{field.Invalid(p, cidr, "prefix must be /30 or shorter: the gateway and the guest need addresses")}
	}
	return nil
}

func oneOf(p *field.Path, val string, allowed ...string) field.ErrorList {
	for _, a := range allowed {
		if val == a {
			return nil
		}
	}
	return field.ErrorList{field.NotSupported(p, val, allowed)}
}

func absPath(p *field.Path, val string) field.ErrorList {
	if val == "" {
		return nil
	}
	if !path.IsAbs(val) || path.Clean(val) != val {
		return field.ErrorList{field.Invalid(p, val, "must be a clean absolute path")}
	}
	return nil
}

func dnsLabel(p *field.Path, val string) field.ErrorList {
	if val == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	var errs field.ErrorList
	for _, msg := range utilvalidation.IsDNS1123Label(val) {
		errs = append(errs, field.Invalid(p, val, msg))
	}
	return errs
}

func dnsSubdomain(p *field.Path, val string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range utilvalidation.IsDNS1123Subdomain(val) {
		errs = append(errs, field.Invalid(p, val, msg))
	}
	return errs
}
