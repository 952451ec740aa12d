package v1beta1

// Labels on a volume's PersistentVolumeClaim naming the instance type and
// preference a VirtualMachine infers from it (spec.instancetype.inferFromVolume).
// They are KubeVirt's, so images and claims labelled for KubeVirt (by CDI,
// by common-instancetypes' tooling) work unchanged. A missing -kind label
// means the cluster-wide kind.
const (
	DefaultInstancetypeLabel     = "instancetype.kubevirt.io/default-instancetype"
	DefaultInstancetypeKindLabel = "instancetype.kubevirt.io/default-instancetype-kind"
	DefaultPreferenceLabel       = "instancetype.kubevirt.io/default-preference"
	DefaultPreferenceKindLabel   = "instancetype.kubevirt.io/default-preference-kind"
)

// Labels on the ControllerRevision that keeps the instance type or
// preference a VirtualMachine started from (KubeVirt's, under kemu's group).
const (
	RevisionObjectNameLabel       = GroupName + "/object-name"
	RevisionObjectKindLabel       = GroupName + "/object-kind"
	RevisionObjectUIDLabel        = GroupName + "/object-uid"
	RevisionObjectGenerationLabel = GroupName + "/object-generation"
	RevisionObjectVersionLabel    = GroupName + "/object-version"
)
