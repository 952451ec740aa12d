package qmp

import "context"

// GuestUser is one entry of guest-get-users: a user logged in to the guest.
type GuestUser struct {
	User   string `json:"user"`
	Domain string `json:"domain"` // Windows only
	// LoginTime is seconds since the Unix epoch (fractional).
	LoginTime float64 `json:"login-time"`
}

// GuestDiskAddress is one disk under a guest filesystem (guest-get-fsinfo).
type GuestDiskAddress struct {
	BusType string `json:"bus-type"` // ide, scsi, virtio, sata, …
	Bus     int    `json:"bus"`
	Target  int    `json:"target"`
	Unit    int    `json:"unit"`
	Serial  string `json:"serial"`
	Dev     string `json:"dev"`
}

// GuestFilesystemInfo is one entry of guest-get-fsinfo. UsedBytes and
// TotalBytes are nil when the agent could not tell (statvfs failed).
type GuestFilesystemInfo struct {
	Name       string             `json:"name"`
	Mountpoint string             `json:"mountpoint"`
	Type       string             `json:"type"`
	UsedBytes  *uint64            `json:"used-bytes"`
	TotalBytes *uint64            `json:"total-bytes"`
	Disks      []GuestDiskAddress `json:"disk"`
}

// Users returns the users logged in to the guest (guest-get-users). The
// reply, like every agent reply, is bounded by MaxAgentLineSize.
func (a *Agent) Users(ctx context.Context) ([]GuestUser, error) {
	var u []GuestUser
	return u, a.Execute(ctx, "guest-get-users", nil, &u)
}

// Filesystems returns the guest's mounted filesystems with their usage and
// disks (guest-get-fsinfo). The reply is bounded by MaxAgentLineSize.
func (a *Agent) Filesystems(ctx context.Context) ([]GuestFilesystemInfo, error) {
	var f []GuestFilesystemInfo
	return f, a.Execute(ctx, "guest-get-fsinfo", nil, &f)
}
