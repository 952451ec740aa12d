package v1alpha1

// VolumeClaim is the PVC a volume uses: a persistentVolumeClaim (mounted
// read-only when it says readOnly), a dataVolume's (the PVC of the
// DataVolume's name, read-write) or an ephemeral volume's (always
// mounted read-only: the guest writes to an overlay). ok is false for
// other sources. The controller mounts claims, the node agent asks their
// access modes and the launcher finds them by this one rule.
func VolumeClaim(v *Volume) (claim string, readOnly, ok bool) {
	switch {
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.ClaimName, v.PersistentVolumeClaim.ReadOnly, true
	case v.DataVolume != nil:
		return v.DataVolume.Name, false, true
	case v.Ephemeral != nil && v.Ephemeral.PersistentVolumeClaim != nil:
		return v.Ephemeral.PersistentVolumeClaim.ClaimName, true, true
	}
	return "", false, false
}
