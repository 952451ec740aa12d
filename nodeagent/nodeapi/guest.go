package nodeapi

import (
	"context"
	"encoding/json"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/subresources"
	"github.com/kemu-dev/kemu/kube/nodeapi"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/nodeagent/vmi"
)

// serveGuest answers guestosinfo, userlist and filesystemlist from the
// guest agent through the launcher, within CallTimeout: 503 while the
// domain reports no guest agent, the launcher's refusal mapped by
// httpStatus.
func (s *Server) serveGuest(w http.ResponseWriter, r *http.Request, verb string, l vmi.APILauncher) {
	if !l.AgentConnected {
		writeError(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "the guest agent is not connected")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.CallTimeout)
	defer cancel()
	var out any
	var err error
	switch verb {
	case nodeapi.GuestOSInfo:
		var info *rpc.GuestInfoResponse
		if info, err = l.Client.GuestInfo(ctx, &rpc.Empty{}); err == nil {
			out = GuestAgentInfo(info)
		}
	case nodeapi.UserList:
		var users *rpc.GuestUsersResponse
		if users, err = l.Client.GuestUsers(ctx, &rpc.Empty{}); err == nil {
			out = UserList(users)
		}
	case nodeapi.FilesystemList:
		var fs *rpc.GuestFilesystemsResponse
		if fs, err = l.Client.GuestFilesystems(ctx, &rpc.Empty{}); err == nil {
			out = FilesystemList(fs)
		}
	}
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Guest agent call failed", "err", err)
		writeRPCError(w, verb, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// GuestAgentInfo is guestosinfo's body from the launcher's GuestInfo.
func GuestAgentInfo(in *rpc.GuestInfoResponse) *subresources.GuestAgentInfo {
	out := &subresources.GuestAgentInfo{
		GAVersion: in.GetAgentVersion(),
		Hostname:  in.GetHostname(),
		OS: subresources.GuestOSInfo{
			Name: in.GetOsName(), KernelRelease: in.GetKernelRelease(), Version: in.GetOsVersion(),
			PrettyName: in.GetOsPrettyName(), VersionID: in.GetOsVersionId(), KernelVersion: in.GetKernelVersion(),
			Machine: in.GetMachine(), ID: in.GetOsId(),
		},
	}
	for _, i := range in.GetInterfaces() {
		out.Interfaces = append(out.Interfaces, subresources.GuestNetIface{Name: i.GetName(), MAC: i.GetMac(), IPAddresses: i.GetIpAddresses()})
	}
	return out
}

// UserList is userlist's body from the launcher's GuestUsers.
func UserList(in *rpc.GuestUsersResponse) *subresources.GuestOSUserList {
	out := &subresources.GuestOSUserList{Items: []subresources.GuestOSUser{}}
	for _, u := range in.GetUsers() {
		out.Items = append(out.Items, subresources.GuestOSUser{UserName: u.GetUserName(), Domain: u.GetDomain(), LoginTime: u.GetLoginTime()})
	}
	return out
}

// FilesystemList is filesystemlist's body from the launcher's
// GuestFilesystems. Sizes beyond int64 (a hostile guest) are clamped.
func FilesystemList(in *rpc.GuestFilesystemsResponse) *subresources.FileSystemList {
	out := &subresources.FileSystemList{Items: []subresources.FileSystem{}}
	for _, f := range in.GetFilesystems() {
		fs := subresources.FileSystem{DiskName: f.GetDiskName(), MountPoint: f.GetMountPoint(), FileSystemType: f.GetType(),
			UsedBytes: clampInt64(f.GetUsedBytes()), TotalBytes: clampInt64(f.GetTotalBytes())}
		for _, d := range f.GetDisks() {
			fs.Disk = append(fs.Disk, subresources.FileSystemDisk{Serial: d.GetSerial(), BusType: d.GetBusType()})
		}
		out.Items = append(out.Items, fs)
	}
	return out
}

func clampInt64(v uint64) int64 {
	if v > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(v)
}
