package subresources

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The request bodies of the PUT verbs (all optional: an empty body is the
// zero value) and the reply bodies of the GET verbs, as KubeVirt's
// kubevirt.io/v1 types of the same names and JSON fields.

// PauseOptions is the body of pause.
type PauseOptions struct {
	metav1.TypeMeta `json:",inline"`
	// DryRun ["All"] checks the request without acting.
	DryRun []string `json:"dryRun,omitempty"`
}

// UnpauseOptions is the body of unpause.
type UnpauseOptions struct {
	metav1.TypeMeta `json:",inline"`
	DryRun          []string `json:"dryRun,omitempty"`
}

// SoftRebootOptions is the body of softreboot.
type SoftRebootOptions struct {
	metav1.TypeMeta `json:",inline"`
	DryRun          []string `json:"dryRun,omitempty"`
}

// MigrateOptions is the body of migrate.
type MigrateOptions struct {
	metav1.TypeMeta `json:",inline"`
	DryRun          []string `json:"dryRun,omitempty"`
}

// StartOptions is the body of start.
type StartOptions struct {
	metav1.TypeMeta `json:",inline"`
	// Paused starts the VM with its vCPUs paused.
	Paused bool     `json:"paused,omitempty"`
	DryRun []string `json:"dryRun,omitempty"`
}

// StopOptions is the body of stop.
type StopOptions struct {
	metav1.TypeMeta `json:",inline"`
	// GracePeriod overrides the VMI's terminationGracePeriodSeconds.
	GracePeriod *int64   `json:"gracePeriod,omitempty"`
	DryRun      []string `json:"dryRun,omitempty"`
}

// RestartOptions is the body of restart.
type RestartOptions struct {
	metav1.TypeMeta    `json:",inline"`
	GracePeriodSeconds *int64   `json:"gracePeriodSeconds,omitempty"`
	DryRun             []string `json:"dryRun,omitempty"`
}

// DryRunAll is the only dryRun value, as in the Kubernetes API.
const DryRunAll = "All"

// GuestAgentInfo is guestosinfo's reply (KubeVirt's
// VirtualMachineInstanceGuestAgentInfo).
type GuestAgentInfo struct {
	metav1.TypeMeta `json:",inline"`
	GAVersion       string          `json:"guestAgentVersion,omitempty"`
	Hostname        string          `json:"hostname,omitempty"`
	OS              GuestOSInfo     `json:"os,omitempty"`
	Timezone        string          `json:"timezone,omitempty"`
	UserList        []GuestOSUser   `json:"userList,omitempty"`
	FSInfo          FileSystemInfo  `json:"fsInfo,omitempty"`
	Interfaces      []GuestNetIface `json:"interfaces,omitempty"`
}

// GuestOSInfo is the guest's operating system (guest-get-osinfo).
type GuestOSInfo struct {
	Name          string `json:"name,omitempty"`
	KernelRelease string `json:"kernelRelease,omitempty"`
	Version       string `json:"version,omitempty"`
	PrettyName    string `json:"prettyName,omitempty"`
	VersionID     string `json:"versionId,omitempty"`
	KernelVersion string `json:"kernelVersion,omitempty"`
	Machine       string `json:"machine,omitempty"`
	ID            string `json:"id,omitempty"`
}

// GuestNetIface is one guest network interface (guest-network-get-interfaces).
type GuestNetIface struct {
	Name        string   `json:"interfaceName,omitempty"`
	MAC         string   `json:"mac,omitempty"`
	IPAddresses []string `json:"ipAddresses,omitempty"`
}

// GuestOSUser is one logged-in user (guest-get-users).
type GuestOSUser struct {
	UserName  string  `json:"userName"`
	Domain    string  `json:"domain,omitempty"`
	LoginTime float64 `json:"loginTime,omitempty"`
}

// GuestOSUserList is userlist's reply.
type GuestOSUserList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GuestOSUser `json:"items"`
}

// FileSystemInfo is the filesystems part of guestosinfo.
type FileSystemInfo struct {
	Filesystems []FileSystem `json:"disks"`
}

// FileSystem is one mounted guest filesystem (guest-get-fsinfo).
type FileSystem struct {
	DiskName       string           `json:"diskName"`
	MountPoint     string           `json:"mountPoint"`
	FileSystemType string           `json:"fileSystemType"`
	UsedBytes      int64            `json:"usedBytes"`
	TotalBytes     int64            `json:"totalBytes"`
	Disk           []FileSystemDisk `json:"disk,omitempty"`
}

// FileSystemDisk is a disk under a filesystem.
type FileSystemDisk struct {
	Serial  string `json:"serial,omitempty"`
	BusType string `json:"busType"`
}

// FileSystemList is filesystemlist's reply.
type FileSystemList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FileSystem `json:"items"`
}

// ServerVersion is the version endpoint's reply.
type ServerVersion struct {
	GitVersion string `json:"gitVersion"`
	GoVersion  string `json:"goVersion"`
	Platform   string `json:"platform"`
}
