package nodeapi

import (
	"math"
	"testing"

	"github.com/kemu-dev/kemu/launcher/rpc"
)

func TestConversions(t *testing.T) {
	info := GuestAgentInfo(&rpc.GuestInfoResponse{AgentVersion: "8.2", Hostname: "h", OsId: "kemu-testguest", OsName: "n",
		KernelRelease: "6.1", Interfaces: []*rpc.GuestInterface{{Name: "eth0", Mac: "02:00:00:00:00:01", IpAddresses: []string{"10.0.2.2"}}}})
	if info.GAVersion != "8.2" || info.OS.ID != "kemu-testguest" || info.OS.KernelRelease != "6.1" || len(info.Interfaces) != 1 || info.Interfaces[0].IPAddresses[0] != "10.0.2.2" {
		t.Errorf("guest agent info %+v", info)
	}
	users := UserList(&rpc.GuestUsersResponse{Users: []*rpc.GuestUser{{UserName: "root", LoginTime: 1.5}}})
	if len(users.Items) != 1 || users.Items[0].UserName != "root" || users.Items[0].LoginTime != 1.5 {
		t.Errorf("users %+v", users)
	}
	if empty := UserList(&rpc.GuestUsersResponse{}); empty.Items == nil {
		t.Error("no users must be an empty list, not null")
	}
	fs := FilesystemList(&rpc.GuestFilesystemsResponse{Filesystems: []*rpc.GuestFilesystem{{DiskName: "vda1", MountPoint: "/", Type: "ext4",
		UsedBytes: math.MaxUint64, TotalBytes: 10, Disks: []*rpc.GuestFilesystemDisk{{Serial: "s", BusType: "virtio"}}}}})
	if len(fs.Items) != 1 || fs.Items[0].UsedBytes != math.MaxInt64 || fs.Items[0].TotalBytes != 10 || fs.Items[0].Disk[0].BusType != "virtio" {
		t.Errorf("filesystems %+v", fs)
	}
}
