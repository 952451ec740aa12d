package v1alpha1

// MaxFilesystemTagLength is the longest tag a virtio-fs device takes (the
// virtio specification's 36 bytes; QEMU refuses a longer one): a
// filesystem's name is its tag.
const MaxFilesystemTagLength = 36

// FilesystemSource is the kind of a volume a filesystem may share
// ("persistentVolumeClaim", "configMap", "secret", "serviceAccount",
// "downwardAPI", "containerPath"), and whether the share is read-only: the config kinds
// always (the kubelet mounts them read-only), a claim with readOnly. ""
// for every other kind.
func FilesystemSource(v *Volume) (kind string, readOnly bool) {
	switch {
	case v.PersistentVolumeClaim != nil:
		return "persistentVolumeClaim", v.PersistentVolumeClaim.ReadOnly
	case v.ConfigMap != nil:
		return "configMap", true
	case v.Secret != nil:
		return "secret", true
	case v.ServiceAccount != nil:
		return "serviceAccount", true
	case v.DownwardAPI != nil:
		return "downwardAPI", true
	case v.ContainerPath != nil:
		return "containerPath", true
	}
	return "", false
}

// FilesystemNames are the names of the volumes spec shares as filesystems.
func FilesystemNames(spec *VirtualMachineInstanceSpec) map[string]bool {
	names := map[string]bool{}
	for _, f := range spec.Domain.Devices.Filesystems {
		names[f.Name] = true
	}
	return names
}
