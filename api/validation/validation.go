// Package validation checks kemu.dev/v1alpha1 objects after defaulting. Every
// component (kemuctl, controller, node agent, launcher) uses it, so a VMI is
// judged the same way everywhere. Errors carry field paths as
// k8s.io/apimachinery's field.ErrorList.
package validation

import (
	"encoding/base64"
	"fmt"
	"net"
	"net/netip"
	"path"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	interfaceModels = []string{"virtio", "e1000", "e1000e", "rtl8139"}
	pullPolicies    = []string{string(corev1.PullAlways), string(corev1.PullIfNotPresent), string(corev1.PullNever)}
)

// ValidateVirtualMachineInstance validates a defaulted VMI.
func ValidateVirtualMachineInstance(vmi *v1.VirtualMachineInstance) field.ErrorList {
	allErrs := Unsupported(vmi, nil)
	allErrs = append(allErrs, validateObjectMeta(&vmi.ObjectMeta)...)
	allErrs = append(allErrs, validateFeatureAnnotations(vmi.Annotations, field.NewPath("metadata", "annotations"))...)
	allErrs = append(allErrs, ValidateVirtualMachineInstanceSpec(&vmi.Spec, field.NewPath("spec"))...)
	return allErrs
}

// validateObjectMeta checks the name and namespace when they are set (a
// manifest for kemuctl may leave them out): the API server's rules, which a
// local manifest does not pass through; both reach QEMU's -name.
func validateObjectMeta(m *metav1.ObjectMeta) field.ErrorList {
	var allErrs field.ErrorList
	if m.Name != "" {
		allErrs = append(allErrs, dnsSubdomain(field.NewPath("metadata", "name"), m.Name)...)
	}
	if m.Namespace != "" {
		allErrs = append(allErrs, dnsLabel(field.NewPath("metadata", "namespace"), m.Namespace)...)
	}
	return allErrs
}

// ValidateVirtualMachine validates a defaulted VM.
func ValidateVirtualMachine(vm *v1.VirtualMachine) field.ErrorList {
	allErrs := Unsupported(vm, nil)
	allErrs = append(allErrs, validateObjectMeta(&vm.ObjectMeta)...)
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
	allErrs = append(allErrs, ValidateMatchers(vm, spec)...)
	allErrs = append(allErrs, ValidateDataVolumeTemplates(vm, spec.Child("dataVolumeTemplates"))...)
	if vm.Spec.Template == nil {
		allErrs = append(allErrs, field.Required(spec.Child("template"), "a VM needs a VMI template"))
	} else {
		allErrs = append(allErrs, validateFeatureAnnotations(vm.Spec.Template.ObjectMeta.Annotations,
			spec.Child("template", "metadata", "annotations"))...)
		tmpl := spec.Child("template", "spec")
		for _, e := range ValidateVirtualMachineInstanceSpec(&vm.Spec.Template.Spec, tmpl) {
			// An instance type always gives the guest's memory: a template
			// that leaves it to one is complete (the VMI it expands to is
			// validated again).
			if vm.Spec.Instancetype != nil && e.Type == field.ErrorTypeRequired &&
				e.Field == tmpl.Child("domain", "memory", "guest").String() {
				continue
			}
			allErrs = append(allErrs, e)
		}
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
	allErrs = append(allErrs, validateFilesystems(spec, fldPath)...)
	allErrs = append(allErrs, validateNetworks(spec, fldPath)...)
	allErrs = append(allErrs, validateQEMUDevices(spec, fldPath)...)
	allErrs = append(allErrs, validatePodFields(spec, fldPath)...)
	allErrs = append(allErrs, validateProbes(spec, fldPath)...)

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
	allErrs = append(allErrs, validatePlacement(d, fldPath)...)

	machine := ""
	if d.Machine != nil {
		machine = d.Machine.Type
	}
	_, maxVCPUs, machineOK := machineKind(machine)
	switch {
	case machine == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("machine", "type"), "defaulting sets q35"))
	case !q35Pattern.MatchString(machine) && !i440fxPattern.MatchString(machine):
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("machine", "type"), machine,
			[]string{"q35", "pc-q35-X.Y", "pc", "pc-i440fx-X.Y"}))
	case !machineOK:
		allErrs = append(allErrs, field.Invalid(fldPath.Child("machine", "type"), machine,
			"not a machine type of any QEMU: pc-q35-X.Y from 2.4, pc-i440fx-X.Y from 1.4"))
	}

	if d.CPU != nil {
		p := fldPath.Child("cpu")
		limit, why := MaxVCPUs, ""
		if machineOK && maxVCPUs < limit {
			limit, why = maxVCPUs, fmt.Sprintf(" on machine type %s", machine)
		}
		if n := uint64(d.CPU.Sockets) * uint64(d.CPU.Cores) * uint64(d.CPU.Threads); n > uint64(limit) {
			allErrs = append(allErrs, field.Invalid(p, n, fmt.Sprintf("sockets*cores*threads must be at most %d%s", limit, why)))
		}
		for name, n := range map[string]uint32{"sockets": d.CPU.Sockets, "cores": d.CPU.Cores, "threads": d.CPU.Threads} {
			if n == 0 {
				allErrs = append(allErrs, field.Invalid(p.Child(name), n, "must be at least 1"))
			}
		}
		if m := d.CPU.Model; m != "" && (!cpuModelPattern.MatchString(m) || isHelp(m)) {
			allErrs = append(allErrs, field.Invalid(p.Child("model"), m,
				"must be host-passthrough, host-model or a QEMU CPU model name"))
		}
		allErrs = append(allErrs, validateCPUFeatures(d.CPU.Features, p.Child("features"))...)
	}
	allErrs = append(allErrs, validateFeatures(d.Features, d.CPU, fldPath.Child("features"))...)

	if d.Firmware != nil {
		allErrs = append(allErrs, validateFirmware(d.Firmware, fldPath.Child("firmware"))...)
	}
	if f := d.Features; f != nil && f.SMM != nil && f.SMM.Enabled != nil && !*f.SMM.Enabled && v1.SecureBoot(d.Firmware) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("features", "smm", "enabled"), false,
			"EFI Secure Boot needs SMM (KubeVirt's rule): leave SMM on or set firmware.bootloader.efi.secureBoot: false"))
	}

	allErrs = append(allErrs, validateClock(d.Clock, fldPath.Child("clock"))...)
	allErrs = append(allErrs, validateWatchdog(d.Devices.Watchdog, fldPath.Child("devices", "watchdog"))...)
	allErrs = append(allErrs, validateInputs(d.Devices.Inputs, fldPath.Child("devices", "inputs"))...)

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
			if *bo < 1 || *bo > MaxBootOrder {
				allErrs = append(allErrs, field.Invalid(p.Child("bootOrder"), *bo,
					fmt.Sprintf("must be between 1 and %d (QEMU's bootindex is an int32)", MaxBootOrder)))
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
		allErrs = append(allErrs, validateDiskTuning(&disk, p)...)
	}
	if pol := d.IOThreadsPolicy; pol != nil {
		p := fldPath.Child("ioThreadsPolicy")
		switch *pol {
		case v1.IOThreadsPolicyShared, v1.IOThreadsPolicyAuto:
		case v1.IOThreadsPolicySupplementalPool:
			allErrs = append(allErrs, field.Invalid(p, *pol,
				"supplementalPool is not supported by kemu: its QEMU (7.2) gives a disk one iothread, not a pool; use shared or auto"))
		default:
			allErrs = append(allErrs, field.NotSupported(p, *pol,
				[]string{string(v1.IOThreadsPolicyShared), string(v1.IOThreadsPolicyAuto)}))
		}
	}
	return allErrs
}

// validateDiskTuning checks a disk's iothread, cache, io and shareable
// (KubeVirt's rules, and what QEMU would refuse): dedicated iothreads only
// on virtio disks (KubeVirt's admitter; QEMU's SATA and SCSI disks have no
// iothread of their own), the cache and io values, io native only with cache none (QEMU: "aio=native
// was specified, but it requires cache.direct=on"), a shareable disk only
// with cache none. Whether cache none is possible at all (O_DIRECT) is a
// fact of the node's file system: the launcher refuses it there, naming
// the cache field.
func validateDiskTuning(disk *v1.Disk, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if dd := disk.DedicatedIOThread; dd != nil && *dd && !v1.DiskHasIOThread(disk) {
		what := "a CD-ROM"
		switch {
		case disk.Disk != nil:
			what = fmt.Sprintf("a disk on bus %s", disk.Disk.Bus)
		case disk.LUN != nil:
			what = "a lun"
		}
		allErrs = append(allErrs, field.Invalid(p.Child("dedicatedIOThread"), true,
			fmt.Sprintf("iothreads are only for virtio disks, not %s", what)))
	}
	if c := disk.Cache; c != "" {
		allErrs = append(allErrs, oneOf(p.Child("cache"), string(c),
			string(v1.CacheNone), string(v1.CacheWriteThrough), string(v1.CacheWriteBack))...)
	}
	if io := disk.IO; io != "" {
		allErrs = append(allErrs, oneOf(p.Child("io"), string(io), string(v1.IONative), string(v1.IOThreads))...)
		if io == v1.IONative && disk.Cache != "" && disk.Cache != v1.CacheNone {
			allErrs = append(allErrs, field.Invalid(p.Child("io"), io,
				fmt.Sprintf("native needs cache none (O_DIRECT), not %s", disk.Cache)))
		}
	}
	if sh := disk.Shareable; sh != nil && *sh && disk.Cache != "" && disk.Cache != v1.ShareableDiskCache {
		allErrs = append(allErrs, field.Invalid(p.Child("cache"), disk.Cache,
			fmt.Sprintf("a shareable disk needs cache %s (its default)", v1.ShareableDiskCache)))
	}
	return allErrs
}

func validateResources(d *v1.DomainSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	res := fldPath.Child("resources")
	// A resource's path is written as its YAML is: requests.memory.
	for name, req := range d.Resources.Requests {
		if req.Sign() < 0 {
			allErrs = append(allErrs, field.Invalid(res.Child("requests", string(name)), req.String(), "must not be negative"))
		}
		if lim, ok := d.Resources.Limits[name]; ok && req.Cmp(lim) > 0 {
			allErrs = append(allErrs, field.Invalid(res.Child("requests", string(name)), req.String(),
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
		if _, err := uuid.Parse(string(fw.UUID)); err != nil || !canonicalUUID.MatchString(string(fw.UUID)) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("uuid"), fw.UUID,
				"must be a UUID in the form xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (the only one QEMU parses)"))
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
			allErrs = append(allErrs, image(cp.Child("image"), c.Image)...)
			if c.KernelPath == "" {
				// QEMU: "-initrd only allowed with -kernel option".
				allErrs = append(allErrs, field.Required(cp.Child("kernelPath"), "kernel boot needs a kernel (QEMU takes an initrd only with one)"))
			}
			allErrs = append(allErrs, filePath(cp.Child("kernelPath"), c.KernelPath)...)
			allErrs = append(allErrs, filePath(cp.Child("initrdPath"), c.InitrdPath)...)
			// QEMU splits -initrd at ',' (several multiboot modules; ",,"
			// is a comma there, but a Linux kernel's initrd is opened by
			// the name as it is, so no escaping suits both) and cuts a
			// module's name at ' ' (the rest are its arguments).
			if strings.ContainsAny(c.InitrdPath, ", ") {
				allErrs = append(allErrs, field.Invalid(cp.Child("initrdPath"), c.InitrdPath,
					"must not contain ',' or ' ': QEMU splits -initrd there (multiboot modules and their arguments)"))
			}
			// The init container copies both into one directory by their
			// file names (kemu-copy refuses two sources of one name).
			if c.KernelPath != "" && c.InitrdPath != "" && path.Base(c.KernelPath) == path.Base(c.InitrdPath) {
				allErrs = append(allErrs, field.Invalid(cp.Child("initrdPath"), c.InitrdPath,
					fmt.Sprintf("has the file name of kernelPath (%q): both are copied into one directory by file name", path.Base(c.KernelPath))))
			}
			if c.ImagePullPolicy != "" {
				allErrs = append(allErrs, oneOf(cp.Child("imagePullPolicy"), string(c.ImagePullPolicy), pullPolicies...)...)
			}
		}
		switch ka := kb.KernelArgs; {
		case len(ka) > MaxArgLength:
			allErrs = append(allErrs, field.TooLong(p.Child("kernelArgs"), "", MaxArgLength))
		case controlChar(ka) >= 0:
			allErrs = append(allErrs, field.Invalid(p.Child("kernelArgs"), ka,
				fmt.Sprintf("must not contain control characters (found %U): QEMU's -append takes one line", controlChar(ka))))
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
	}
	if disk.LUN != nil {
		allErrs = append(allErrs, validateLUN(disk, p)...)
	}
	return allErrs
}

// validateLUN checks a lun: scsi only (the one bus on which QEMU passes
// SCSI commands through: scsi-block), no persistent reservations (QEMU's
// pr-manager-helper is a privileged daemon on the node) and no serial
// (scsi-block has none: the guest sees the device's own). The volume must
// be a claim (validateQEMUDevices), a block-mode one whose device speaks
// SCSI (the launcher's probe).
func validateLUN(disk *v1.Disk, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	lp := p.Child("lun")
	switch bus := disk.LUN.Bus; bus {
	case v1.DiskBusSCSI:
	case v1.DiskBusVirtio, v1.DiskBusSATA:
		allErrs = append(allErrs, field.Invalid(lp.Child("bus"), bus,
			"a lun passes SCSI commands through only on bus scsi (QEMU's scsi-block): SATA has no passthrough, "+
				"and QEMU's virtio-blk has it only as a legacy (virtio 0.9) device"))
	default:
		allErrs = append(allErrs, field.NotSupported(lp.Child("bus"), bus, []string{string(v1.DiskBusSCSI)}))
	}
	if disk.LUN.Reservation {
		allErrs = append(allErrs, field.Invalid(lp.Child("reservation"), true,
			"persistent reservations need QEMU's pr-manager-helper, a privileged daemon on the node, which kemu does not run"))
	}
	if disk.Serial != "" {
		allErrs = append(allErrs, field.Invalid(p.Child("serial"), disk.Serial,
			"a lun has no serial of its own: the guest sees the SCSI device's (QEMU's scsi-block has no serial)"))
	}
	return allErrs
}

// ValidateLUNClaims refuses a lun whose claim is not a block volume
// (block: a claim's name to whether its volumeMode is Block, as the
// controller reads the PersistentVolumeClaims): scsi-block passes a
// device through, and a file-system claim holds a disk image. Claims
// missing from block count as file systems.
func ValidateLUNClaims(spec *v1.VirtualMachineInstanceSpec, block map[string]bool) field.ErrorList {
	var allErrs field.ErrorList
	claims := map[string]string{}
	for _, v := range spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims[v.Name] = v.PersistentVolumeClaim.ClaimName
		}
	}
	for i, d := range spec.Domain.Devices.Disks {
		claim, ok := claims[d.Name]
		if d.LUN == nil || !ok || block[claim] {
			continue
		}
		allErrs = append(allErrs, field.Invalid(field.NewPath("spec", "domain", "devices", "disks").Index(i).Child("lun"), claim,
			fmt.Sprintf("PersistentVolumeClaim %q has volumeMode Filesystem: a lun passes a SCSI device through and needs volumeMode Block", claim)))
	}
	return allErrs
}

func validateVolumes(spec *v1.VirtualMachineInstanceSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	vols := fldPath.Child("volumes")
	names := sets.New[string]()
	cloudInits, serviceAccounts := 0, 0
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
			allErrs = append(allErrs, field.Required(p, "a volume needs one source: containerDisk, cloudInitNoCloud, cloudInitConfigDrive, "+
				"emptyDisk, hostDisk, persistentVolumeClaim, dataVolume, ephemeral, configMap, secret, serviceAccount, downwardAPI, sysprep or downwardMetrics"))
		case len(sources) > 1:
			allErrs = append(allErrs, field.Invalid(p, strings.Join(sources, ", "), "a volume has exactly one source"))
		}

		if cd := v.ContainerDisk; cd != nil {
			cp := p.Child("containerDisk")
			allErrs = append(allErrs, image(cp.Child("image"), cd.Image)...)
			allErrs = append(allErrs, filePath(cp.Child("path"), cd.Path)...)
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
		if cd := v.CloudInitConfigDrive; cd != nil {
			cloudInits++
			if cloudInits > 1 {
				allErrs = append(allErrs, field.Invalid(p.Child("cloudInitConfigDrive"), v.Name, "a VMI has at most one cloud-init volume"))
			}
			ci := v1.CloudInitNoCloudSource(*cd)
			allErrs = append(allErrs, validateCloudInit(&ci, p.Child("cloudInitConfigDrive"))...)
		}
		allErrs = append(allErrs, validateConfigVolume(v, p, &serviceAccounts)...)
		if ed := v.EmptyDisk; ed != nil {
			switch {
			case ed.Capacity.Sign() <= 0:
				allErrs = append(allErrs, field.Invalid(p.Child("emptyDisk", "capacity"), ed.Capacity.String(), "must be greater than 0"))
			case ed.Capacity.Cmp(*resource.NewQuantity(MaxQCOW2Size, resource.BinarySI)) > 0:
				allErrs = append(allErrs, field.Invalid(p.Child("emptyDisk", "capacity"), ed.Capacity.String(),
					"must be at most 2Pi: an emptyDisk is a qcow2 image, and qemu-img creates none larger"))
			}
		}
		if hd := v.HostDisk; hd != nil {
			hp := p.Child("hostDisk")
			if hd.Path == "" {
				allErrs = append(allErrs, field.Required(hp.Child("path"), ""))
			} else {
				allErrs = append(allErrs, filePath(hp.Child("path"), hd.Path)...)
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
			allErrs = append(allErrs, claimName(p.Child("persistentVolumeClaim", "claimName"), pvc.ClaimName)...)
		}
		if dv := v.DataVolume; dv != nil {
			allErrs = append(allErrs, claimName(p.Child("dataVolume", "name"), dv.Name)...)
		}
		if e := v.Ephemeral; e != nil {
			ep := p.Child("ephemeral", "persistentVolumeClaim")
			if e.PersistentVolumeClaim == nil {
				allErrs = append(allErrs, field.Required(ep, "an ephemeral volume is a PVC under a throw-away overlay"))
			} else {
				allErrs = append(allErrs, claimName(ep.Child("claimName"), e.PersistentVolumeClaim.ClaimName)...)
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

// claimName checks a PVC's name: required, a DNS subdomain (the API
// server's rule for PVCs; it is also a directory under the launcher's
// claims directory).
func claimName(p *field.Path, name string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	return dnsSubdomain(p, name)
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
	add(v.CloudInitConfigDrive != nil, "cloudInitConfigDrive")
	add(v.ConfigMap != nil, "configMap")
	add(v.Secret != nil, "secret")
	add(v.ServiceAccount != nil, "serviceAccount")
	add(v.DownwardAPI != nil, "downwardAPI")
	add(v.Sysprep != nil, "sysprep")
	add(v.Ephemeral != nil, "ephemeral")
	add(v.DataVolume != nil, "dataVolume")
	add(v.DownwardMetrics != nil, "downwardMetrics")
	add(v.ContainerPath != nil, "containerPath")
	// Unsupported sources are reported by Unsupported; counted here so a
	// volume with one of them is not also told it has no source.
	for _, u := range []struct {
		set  bool
		name string
	}{
		{v.MemoryDump != nil, "memoryDump"},
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
	// The Secret's name is also a directory under the launcher's secrets
	// directory (and the Pod's mount path): a DNS subdomain, as the API
	// server requires of Secrets, never "..".
	if ci.SecretRef != nil {
		if ci.SecretRef.Name == "" {
			allErrs = append(allErrs, field.Required(p.Child("secretRef", "name"), ""))
		} else {
			allErrs = append(allErrs, dnsSubdomain(p.Child("secretRef", "name"), ci.SecretRef.Name)...)
		}
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
			allErrs = append(allErrs, field.Required(p.Child("pod"), "a network needs a source: pod or multus"))
		}
	}
	allErrs = append(allErrs, validateMultusNetworks(spec, fldPath)...)

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
		switch bindings := interfaceBindings(iface); {
		case bindings > 1:
			allErrs = append(allErrs, field.Invalid(p, iface.Name, "an interface has one binding: masquerade, bridge or passtBinding"))
		case bindings == 0:
			if iface.Slirp == nil && iface.SRIOV == nil && iface.Macvtap == nil && iface.Passt == nil {
				allErrs = append(allErrs, field.Required(p.Child("masquerade"), "an interface needs a binding: masquerade, bridge or passtBinding"))
			}
		case iface.Masquerade != nil && ok && network.Pod == nil:
			allErrs = append(allErrs, field.Invalid(p.Child("masquerade"), iface.Name, "masquerade is only for the pod network"))
		}
		allErrs = append(allErrs, validatePasstInterface(p, iface, network, ok)...)
		allErrs = append(allErrs, ValidateInterfaceState(p.Child("state"), iface.State)...)
		if len(iface.Ports) > 0 && iface.Masquerade == nil && !iface.UsesPasst() {
			allErrs = append(allErrs, field.Invalid(p.Child("ports"), len(iface.Ports), "ports are only forwarded with the masquerade and passt bindings"))
		}
		if iface.Model != "" {
			allErrs = append(allErrs, oneOf(p.Child("model"), iface.Model, interfaceModels...)...)
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

// validateVMNetworkCIDR parses as netsetup and kemuctl run's user
// networking do (net/netip, which refuses what net.ParseCIDR lets through:
// IPv4-mapped IPv6 such as ::ffff:10.0.0.0/8, a prefix length with a
// leading zero such as /024).
func validateVMNetworkCIDR(p *field.Path, cidr string) field.ErrorList {
	pfx, err := netip.ParsePrefix(cidr)
	if err != nil || !pfx.Addr().Is4() {
		return field.ErrorList{field.Invalid(p, cidr, "must be an IPv4 CIDR such as 10.0.2.0/24")}
	}
	if pfx.Bits() > 30 {
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

// filePath checks a path of a file QEMU, qemu-img or kemu-copy opens ("" is
// left to the caller): a clean absolute path naming a file (not "/"), at
// most PATH_MAX and each element at most NAME_MAX bytes, no control
// characters (they would reach QEMU's argv or the guest's disk metadata).
func filePath(p *field.Path, val string) field.ErrorList {
	switch {
	case val == "":
		return nil
	case !path.IsAbs(val) || path.Clean(val) != val:
		return field.ErrorList{field.Invalid(p, val, "must be a clean absolute path")}
	case val == "/":
		return field.ErrorList{field.Invalid(p, val, "must name a file, not the root directory")}
	case len(val) > MaxPathLength:
		return field.ErrorList{field.TooLong(p, "", MaxPathLength)}
	case controlChar(val) >= 0:
		return field.ErrorList{field.Invalid(p, val, fmt.Sprintf("must not contain control characters (found %U)", controlChar(val)))}
	}
	for _, el := range strings.Split(val[1:], "/") {
		if len(el) > MaxFileNameLength {
			return field.ErrorList{field.Invalid(p, val, fmt.Sprintf("a path element is %d bytes; at most %d", len(el), MaxFileNameLength))}
		}
	}
	return nil
}

// image checks a container image reference: required, and no white space
// or control characters (the API server refuses a Pod whose image has
// leading or trailing white space, and no registry name has any).
func image(p *field.Path, val string) field.ErrorList {
	if val == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	if i := strings.IndexFunc(val, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 || !utf8.ValidString(val) {
		return field.ErrorList{field.Invalid(p, val, "must not contain white space or control characters")}
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

// validateQEMUDevices refuses device layouts the launcher's QEMU would
// refuse: more SATA disks than q35's AHCI controller has ports, a read-only
// disk on SATA (ide-hd has no read-only mode: "Block node is read-only"),
// more PCI devices than the root bus has free slots, more SCSI disks than
// LUNs, two disks whose block node names collide, and a disk and an
// interface with the same name (both are QEMU device "ua-<name>").
func validateQEMUDevices(spec *v1.VirtualMachineInstanceSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	devs := fldPath.Child("domain", "devices")
	vols := map[string]*v1.Volume{}
	for i := range spec.Volumes {
		if _, dup := vols[spec.Volumes[i].Name]; !dup {
			vols[spec.Volumes[i].Name] = &spec.Volumes[i]
		}
	}
	q35 := true
	if m := spec.Domain.Machine; m != nil {
		q35, _, _ = machineKind(m.Type)
	}
	ids := map[string]string{}   // QEMU device id -> disk name
	stems := map[string]string{} // block node stem -> disk name
	sata, virtio, scsi := 0, 0, 0
	for i := range spec.Domain.Devices.Disks {
		disk := &spec.Domain.Devices.Disks[i]
		p := devs.Child("disks").Index(i)
		if disk.Name == "" {
			continue // reported as required
		}
		ids[QEMUDeviceID(disk.Name)] = disk.Name
		stem := BlockNodeStem(disk.Name)
		if other, dup := stems[stem]; dup && other != disk.Name {
			allErrs = append(allErrs, field.Invalid(p.Child("name"), disk.Name,
				fmt.Sprintf("its QEMU block node name (drive-%s, from its first 16 characters and a hash) is disk %q's too; rename one", stem, other)))
		}
		stems[stem] = disk.Name

		if v := vols[disk.Name]; v != nil && v.DownwardMetrics != nil {
			// KubeVirt's rule: the vhostmd disk is a virtio disk.
			switch {
			case disk.Disk == nil:
				allErrs = append(allErrs, field.Required(p.Child("disk"),
					"a downwardMetrics volume is attached as a disk (virtio), not a cdrom or lun"))
			case disk.Disk.Bus != v1.DiskBusVirtio:
				allErrs = append(allErrs, field.Invalid(p.Child("disk", "bus"), disk.Disk.Bus,
					"a downwardMetrics volume is attached on bus virtio"))
			}
		}
		var bus v1.DiskBus
		var bp *field.Path
		switch {
		case disk.Disk != nil:
			bus, bp = disk.Disk.Bus, p.Child("disk", "bus")
		case disk.CDRom != nil:
			bus, bp = disk.CDRom.Bus, p.Child("cdrom", "bus")
		case disk.LUN != nil:
			bus, bp = disk.LUN.Bus, p.Child("lun", "bus")
			if v := vols[disk.Name]; v != nil && v.PersistentVolumeClaim == nil {
				allErrs = append(allErrs, field.Invalid(p.Child("lun"), disk.Name, fmt.Sprintf(
					"a lun passes a SCSI device through: its volume must be a block-mode persistentVolumeClaim, not %s",
					strings.Join(volumeSources(v), ", "))))
			}
		}
		switch bus {
		case v1.DiskBusVirtio:
			virtio++
		case v1.DiskBusSCSI:
			if scsi++; scsi > MaxSCSIDisks {
				allErrs = append(allErrs, field.Invalid(bp, bus, fmt.Sprintf(
					"SCSI disk, lun or CD-ROM number %d: a virtio-scsi controller has %d LUNs", scsi, MaxSCSIDisks)))
			}
		}
		if bus != v1.DiskBusSATA || !q35 || disk.LUN != nil {
			continue // no SATA, or no AHCI controller (reported by validateDiskTarget)
		}
		sata++
		if sata > SATAPorts {
			allErrs = append(allErrs, field.Invalid(bp, bus, fmt.Sprintf(
				"SATA disk or CD-ROM number %d: q35's AHCI controller has %d ports, one device each; use virtio or scsi", sata, SATAPorts)))
		}
		if disk.Disk == nil {
			continue // a CD-ROM (ide-cd) is read-only anyway
		}
		if disk.Disk.ReadOnly {
			allErrs = append(allErrs, field.Invalid(p.Child("disk", "readonly"), true,
				"QEMU cannot attach a read-only disk to SATA (ide-hd); use bus virtio or scsi, or a cdrom"))
		} else if src := readOnlySource(vols[disk.Name]); src != "" {
			allErrs = append(allErrs, field.Invalid(bp, bus, fmt.Sprintf(
				"volume %q is read-only (%s) and QEMU cannot attach a read-only disk to SATA (ide-hd); use bus virtio or scsi, or a cdrom",
				disk.Name, src)))
		}
	}
	allErrs = append(allErrs, pciSlots(&spec.Domain.Devices, virtio, scsi, devs)...)
	for i := range spec.Domain.Devices.Interfaces {
		name := spec.Domain.Devices.Interfaces[i].Name
		if other, dup := ids[QEMUDeviceID(name)]; dup {
			allErrs = append(allErrs, field.Invalid(devs.Child("interfaces").Index(i).Child("name"), name, fmt.Sprintf(
				"disk %q has the same name: both would be QEMU device %q; disk and interface names must differ", other, QEMUDeviceID(name))))
		}
	}
	return allErrs
}

// pciSlots counts the PCI devices launcher/cmdline adds: one per virtio
// disk, per interface and per filesystem (vhost-user-fs-pci), the
// virtio-scsi controller when there are SCSI
// disks, the virtio-serial controller of the guest agent channel (always),
// the RNG, the balloon and the VGA device (autoattachGraphicsDevice) when
// asked for.
func pciSlots(d *v1.Devices, virtio, scsi int, p *field.Path) field.ErrorList {
	n := virtio + len(d.Interfaces) + len(d.Filesystems) + 1 + devicePCISlots(d)
	if scsi > 0 {
		n++
	}
	if d.Rng != nil {
		n++
	}
	if d.AutoattachMemBalloon == nil || *d.AutoattachMemBalloon {
		n++
	}
	if d.AutoattachGraphicsDevice == nil || *d.AutoattachGraphicsDevice {
		n++
	}
	if n <= PCIRootSlots {
		return nil
	}
	return field.ErrorList{field.Invalid(p, fmt.Sprintf("%d PCI devices", n), fmt.Sprintf(
		"%d virtio disks, %d interfaces and %d filesystems need %d PCI slots with the controllers (guest agent channel, SCSI, RNG, balloon, VGA, watchdog, inputs): "+
			"QEMU's root bus has %d; put disks on scsi", virtio, len(d.Interfaces), len(d.Filesystems), n, PCIRootSlots))}
}

// readOnlySource says why the launcher opens a volume read-only ("" when it
// does not): cloud-init's generated ISO, a claim mounted readOnly.
func readOnlySource(v *v1.Volume) string {
	switch {
	case v == nil:
		return ""
	case v.CloudInitNoCloud != nil:
		return "cloudInitNoCloud"
	case v.CloudInitConfigDrive != nil:
		return "cloudInitConfigDrive"
	case configVolumeKind(v) != "":
		return configVolumeKind(v)
	case v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ReadOnly:
		return "persistentVolumeClaim.readOnly"
	case v.DownwardMetrics != nil:
		return "downwardMetrics"
	}
	return ""
}
