package cmdserver

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kemu-dev/kemu/launcher"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/qmp"
)

// agentStatus maps a guest agent error: the agent's own refusal (a
// disabled or unknown command, a failure in the guest) is
// FailedPrecondition naming the command; the rest as toStatus.
func agentStatus(cmd string, l *launcher.Launcher, err error) error {
	var qe *qmp.Error
	if errors.As(err, &qe) {
		return status.Errorf(codes.FailedPrecondition, "%s: the guest agent refused: %s: %s", cmd, qe.Class, qe.Desc)
	}
	return toStatus(cmd, l, err)
}

// agentCall connects to the guest agent and runs f within the agent
// deadline (10 s when the client set none).
func (s *Server) agentCall(ctx context.Context, cmd string, f func(context.Context, *qmp.Agent) error) error {
	l, err := s.need(cmd)
	if err != nil {
		return err
	}
	ctx, cancel := agentCtx(ctx)
	defer cancel()
	a, err := l.Agent(ctx)
	if err != nil {
		return toStatus(cmd, l, err)
	}
	return agentStatus(cmd, l, f(ctx, a))
}

// GuestUsers asks the guest agent who is logged in (guest-get-users).
func (s *Server) GuestUsers(ctx context.Context, _ *rpc.Empty) (*rpc.GuestUsersResponse, error) {
	out := &rpc.GuestUsersResponse{}
	err := s.agentCall(ctx, "guest-get-users", func(ctx context.Context, a *qmp.Agent) error {
		users, err := a.Users(ctx)
		for _, u := range users {
			out.Users = append(out.Users, &rpc.GuestUser{UserName: u.User, Domain: u.Domain, LoginTime: u.LoginTime})
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GuestFilesystems asks the guest agent for its mounted filesystems, their
// usage and disks (guest-get-fsinfo).
func (s *Server) GuestFilesystems(ctx context.Context, _ *rpc.Empty) (*rpc.GuestFilesystemsResponse, error) {
	out := &rpc.GuestFilesystemsResponse{}
	err := s.agentCall(ctx, "guest-get-fsinfo", func(ctx context.Context, a *qmp.Agent) error {
		fss, err := a.Filesystems(ctx)
		for _, f := range fss {
			out.Filesystems = append(out.Filesystems, filesystemOf(f))
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// filesystemOf is the reply's form of one guest-get-fsinfo entry (sizes
// the agent did not report are 0).
func filesystemOf(f qmp.GuestFilesystemInfo) *rpc.GuestFilesystem {
	g := &rpc.GuestFilesystem{DiskName: f.Name, MountPoint: f.Mountpoint, Type: f.Type}
	if f.UsedBytes != nil {
		g.UsedBytes = *f.UsedBytes
	}
	if f.TotalBytes != nil {
		g.TotalBytes = *f.TotalBytes
	}
	for _, d := range f.Disks {
		g.Disks = append(g.Disks, &rpc.GuestFilesystemDisk{Serial: d.Serial, BusType: d.BusType})
	}
	return g
}
