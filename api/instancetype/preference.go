package instancetype

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	itv1beta1 "github.com/kemu-dev/kemu/api/instancetype/v1beta1"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// applyPreference fills in what the VMI leaves unset. Volumes without a
// disk get one and a VMI without interfaces gets the pod network first (as
// KubeVirt's expansion does), so the preferred bus and model reach them.
func applyPreference(pref *itv1beta1.VirtualMachinePreferenceSpec, spec *v1.VirtualMachineInstanceSpec, meta *metav1.ObjectMeta) {
	d := &spec.Domain
	if dp := pref.Devices; dp != nil {
		devs := &d.Devices
		for _, f := range []struct {
			pref *bool
			vmi  **bool
		}{
			{dp.PreferredAutoattachGraphicsDevice, &devs.AutoattachGraphicsDevice},
			{dp.PreferredAutoattachMemBalloon, &devs.AutoattachMemBalloon},
			{dp.PreferredAutoattachPodInterface, &devs.AutoattachPodInterface},
			{dp.PreferredAutoattachSerialConsole, &devs.AutoattachSerialConsole},
			{dp.PreferredNetworkInterfaceMultiQueue, &devs.NetworkInterfaceMultiqueue},
		} {
			if f.pref != nil && *f.vmi == nil {
				v := *f.pref
				*f.vmi = &v
			}
		}
		if dp.PreferredRng != nil && devs.Rng == nil {
			devs.Rng = &v1.Rng{}
		}
		v1.AddVolumeDisks(spec)
		for i := range devs.Disks {
			disk := &devs.Disks[i]
			if disk.Disk == nil && disk.CDRom == nil && disk.LUN == nil {
				disk.Disk = &v1.DiskTarget{}
			}
			if disk.Disk != nil && disk.Disk.Bus == "" {
				disk.Disk.Bus = dp.PreferredDiskBus
			}
			if disk.CDRom != nil && disk.CDRom.Bus == "" {
				disk.CDRom.Bus = dp.PreferredCdromBus
			}
		}
		v1.AddPodNetwork(spec)
		for i := range devs.Interfaces {
			iface := &devs.Interfaces[i]
			if iface.Model == "" {
				iface.Model = dp.PreferredInterfaceModel
			}
			if dp.PreferredInterfaceMasquerade != nil && !iface.HasBinding() && onPodNetwork(spec, iface.Name) {
				iface.Masquerade = &v1.InterfaceMasquerade{}
			}
		}
	}

	if fp := pref.Features; fp != nil && fp.PreferredAcpi != nil && fp.PreferredAcpi.Enabled != nil {
		if d.Features == nil {
			d.Features = &v1.Features{}
		}
		if d.Features.ACPI.Enabled == nil {
			on := *fp.PreferredAcpi.Enabled
			d.Features.ACPI.Enabled = &on
		}
	}

	if fw := pref.Firmware; fw != nil {
		applyFirmware(fw, d)
	}

	if m := pref.Machine; m != nil && m.PreferredMachineType != "" {
		if d.Machine == nil {
			d.Machine = &v1.Machine{}
		}
		if d.Machine.Type == "" {
			d.Machine.Type = m.PreferredMachineType
		}
	}

	if g := pref.PreferredTerminationGracePeriodSeconds; g != nil && spec.TerminationGracePeriodSeconds == nil {
		v := *g
		spec.TerminationGracePeriodSeconds = &v
	}

	for k, v := range pref.Annotations {
		if meta.Annotations == nil {
			meta.Annotations = map[string]string{}
		}
		if _, ok := meta.Annotations[k]; !ok {
			meta.Annotations[k] = v
		}
	}
}

// applyFirmware is KubeVirt's order: BIOS when asked and nothing chosen;
// preferredEfi when nothing chosen (and then nothing else); the deprecated
// preferredUseEfi and preferredUseSecureBoot.
func applyFirmware(fw *itv1beta1.FirmwarePreferences, d *v1.DomainSpec) {
	chosen := d.Firmware != nil && d.Firmware.Bootloader != nil &&
		(d.Firmware.Bootloader.BIOS != nil || d.Firmware.Bootloader.EFI != nil)
	bootloader := func() *v1.Bootloader {
		if d.Firmware == nil {
			d.Firmware = &v1.Firmware{}
		}
		if d.Firmware.Bootloader == nil {
			d.Firmware.Bootloader = &v1.Bootloader{}
		}
		return d.Firmware.Bootloader
	}
	switch {
	case chosen:
	case fw.PreferredUseBios != nil && *fw.PreferredUseBios:
		bootloader().BIOS = &v1.BIOS{}
		return
	case fw.PreferredEfi != nil:
		bootloader().EFI = fw.PreferredEfi.DeepCopy()
		return
	case fw.PreferredUseEfi != nil && *fw.PreferredUseEfi:
		bootloader().EFI = &v1.EFI{}
	}
	if fw.PreferredUseSecureBoot != nil && d.Firmware != nil && d.Firmware.Bootloader != nil {
		if efi := d.Firmware.Bootloader.EFI; efi != nil && efi.SecureBoot == nil {
			on := *fw.PreferredUseSecureBoot
			efi.SecureBoot = &on
		}
	}
}

func onPodNetwork(spec *v1.VirtualMachineInstanceSpec, name string) bool {
	for _, n := range spec.Networks {
		if n.Name == name {
			return n.Pod != nil
		}
	}
	return false
}
