package v1beta1

import "strings"

// InstancetypeKindOf reads a VM's spec.instancetype.kind as KubeVirt does:
// empty means the cluster-wide kind; the kind and the singular and plural
// resource names are accepted in any case.
func InstancetypeKindOf(kind string) (string, bool) {
	switch strings.ToLower(kind) {
	case "", strings.ToLower(KindClusterInstancetype), ResourceClusterInstancetypes:
		return KindClusterInstancetype, true
	case strings.ToLower(KindInstancetype), ResourceInstancetypes:
		return KindInstancetype, true
	}
	return "", false
}

// PreferenceKindOf reads a VM's spec.preference.kind as KubeVirt does.
func PreferenceKindOf(kind string) (string, bool) {
	switch strings.ToLower(kind) {
	case "", strings.ToLower(KindClusterPreference), ResourceClusterPreferences:
		return KindClusterPreference, true
	case strings.ToLower(KindPreference), ResourcePreferences:
		return KindPreference, true
	}
	return "", false
}
