package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of kemu's instance types and preferences,
// KubeVirt's instancetype.kubevirt.io under kemu's domain
// (docs/decisions.md).
const GroupName = "instancetype.kemu.dev"

// SchemeGroupVersion is the group and version of this package's types.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1beta1"}

// APIVersion is the apiVersion string of this package's manifests.
var APIVersion = SchemeGroupVersion.String()

// KubeVirtGroup is the API group of KubeVirt's instance types and
// preferences, whose v1beta1 manifests kemu reads and converts.
const KubeVirtGroup = "instancetype.kubevirt.io"

// Kinds of this group.
const (
	KindInstancetype        = "VirtualMachineInstancetype"
	KindClusterInstancetype = "VirtualMachineClusterInstancetype"
	KindPreference          = "VirtualMachinePreference"
	KindClusterPreference   = "VirtualMachineClusterPreference"
)

// Resources of this group (plural; the singular is the plural without its
// final "s").
const (
	ResourceInstancetypes        = "virtualmachineinstancetypes"
	ResourceClusterInstancetypes = "virtualmachineclusterinstancetypes"
	ResourcePreferences          = "virtualmachinepreferences"
	ResourceClusterPreferences   = "virtualmachineclusterpreferences"
)

var (
	// SchemeBuilder registers this package's types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds this package's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Kind returns a group-qualified kind of this version.
func Kind(kind string) schema.GroupKind {
	return SchemeGroupVersion.WithKind(kind).GroupKind()
}

// Resource returns a group-qualified resource of this version.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&VirtualMachineInstancetype{}, &VirtualMachineInstancetypeList{},
		&VirtualMachineClusterInstancetype{}, &VirtualMachineClusterInstancetypeList{},
		&VirtualMachinePreference{}, &VirtualMachinePreferenceList{},
		&VirtualMachineClusterPreference{}, &VirtualMachineClusterPreferenceList{},
	)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
