package cmdserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kemu-dev/kemu/qmp"
)

// An agent error becomes a gRPC status naming the command, never Unknown.
func TestAgentStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
		want string
	}{
		{"refused", &qmp.Error{Command: "guest-get-fsinfo", Class: "GenericError", Desc: "Command guest-get-fsinfo has been disabled"},
			codes.FailedPrecondition, "guest-get-fsinfo: the guest agent refused: GenericError: Command guest-get-fsinfo has been disabled"},
		{"refused, wrapped", fmt.Errorf("x: %w", &qmp.Error{Class: "CommandNotFound", Desc: "no such command"}),
			codes.FailedPrecondition, "the guest agent refused: CommandNotFound"},
		{"timed out", fmt.Errorf("qmp: no reply: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "guest-get-fsinfo"},
		{"connection gone", fmt.Errorf("qmp: %w", qmp.ErrClosed), codes.Unavailable, "guest-get-fsinfo"},
		{"a reply that does not decode", errors.New("qmp: guest-get-fsinfo: decoding the reply: json: cannot unmarshal"),
			codes.Internal, "decoding the reply"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := agentStatus("guest-get-fsinfo", nil, tc.err)
			if st, _ := status.FromError(err); st.Code() != tc.code || !strings.Contains(st.Message(), tc.want) {
				t.Errorf("status %v, want %v with %q", err, tc.code, tc.want)
			}
		})
	}
}

// Sizes the agent did not report are 0; disks keep serial and bus type.
func TestFilesystemOf(t *testing.T) {
	used, total := uint64(1), uint64(2)
	g := filesystemOf(qmp.GuestFilesystemInfo{Name: "vda1", Mountpoint: "/", Type: "ext4", UsedBytes: &used, TotalBytes: &total,
		Disks: []qmp.GuestDiskAddress{{BusType: "scsi", Serial: "S1", Dev: "/dev/sda1"}}})
	if g.DiskName != "vda1" || g.MountPoint != "/" || g.Type != "ext4" || g.UsedBytes != 1 || g.TotalBytes != 2 ||
		len(g.Disks) != 1 || g.Disks[0].Serial != "S1" || g.Disks[0].BusType != "scsi" {
		t.Errorf("filesystem %v", g)
	}
	if g := filesystemOf(qmp.GuestFilesystemInfo{Name: "x"}); g.UsedBytes != 0 || g.TotalBytes != 0 || len(g.Disks) != 0 {
		t.Errorf("no sizes: %v", g)
	}
}
