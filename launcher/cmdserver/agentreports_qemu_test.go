//go:build qemu

package cmdserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/kemu-dev/kemu/launcher/rpc"
)

// The test guest without a graphics device: Vnc answers
// FailedPrecondition; GuestUsers and GuestFilesystems go through its
// qemu-ga 7.2. The test guest runs from its initramfs with no login (no
// utmp), so guest-get-users answers an empty list; guest-get-fsinfo lists
// only filesystems on block devices and the guest mounts none for long (its
// cidata disk only while reading it), so the test mounts its boot
// partition (FAT) through guest-exec and expects to see it.
func TestGuestReportsAndNoGraphics(t *testing.T) {
	s, c := launcherServer(t)
	ctx := ctxFor(t, 5*time.Minute)
	r, err := c.Sync(ctx, &rpc.SyncRequest{VmiJson: vmiJSON(t, "reports", func(y string) string {
		return strings.Replace(y, "autoattachPodInterface: false", "autoattachPodInterface: false\n      autoattachGraphicsDevice: false", 1)
	})})
	if err != nil || r.Domain.State != rpc.DomainState_Running {
		t.Fatalf("sync: %v %v", r, err)
	}

	vs, err := c.Vnc(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = vs.Recv()
	wantCode(t, err, codes.FailedPrecondition, "no graphics device")

	var pingErr error
	for actx := ctxFor(t, bootTimeout); actx.Err() == nil; {
		pctx, cancel := context.WithTimeout(actx, 5*time.Second)
		_, pingErr = c.GuestPing(pctx, &rpc.Empty{})
		cancel()
		if pingErr == nil {
			break
		}
	}
	if pingErr != nil {
		t.Fatalf("guest ping: %v", pingErr)
	}
	users, err := c.GuestUsers(ctx, &rpc.Empty{})
	if err != nil {
		t.Fatalf("guest users: %v", err)
	}
	if len(users.Users) != 0 {
		t.Errorf("guest-get-users: %v; the test guest has no logins", users)
	}
	fss, err := c.GuestFilesystems(ctx, &rpc.Empty{})
	if err != nil {
		t.Fatalf("guest filesystems: %v", err)
	}
	if len(fss.Filesystems) != 0 {
		t.Errorf("guest-get-fsinfo before the mount: %v", fss)
	}

	a, err := s.Launcher().Agent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := a.Run(ctx, "/bin/sh", []string{"-c", "mkdir -p /mnt/boot && mount -t vfat -o ro /dev/vda1 /mnt/boot"}, nil)
	if err != nil || st.ExitCode != 0 {
		t.Fatalf("mounting the boot partition in the guest: %+v %v (stderr %q)", st, err, st.Stderr)
	}
	fss, err = c.GuestFilesystems(ctx, &rpc.Empty{})
	if err != nil {
		t.Fatalf("guest filesystems: %v", err)
	}
	t.Logf("guest-get-fsinfo: %v", fss)
	var boot *rpc.GuestFilesystem
	for _, f := range fss.Filesystems {
		if f.MountPoint == "/mnt/boot" {
			boot = f
		}
	}
	switch {
	case boot == nil:
		t.Fatalf("no /mnt/boot in %v", fss)
	case boot.Type != "vfat" || boot.DiskName != "vda1":
		t.Errorf("boot partition: %v, want vfat on vda1", boot)
	case boot.TotalBytes == 0 || boot.TotalBytes > 64<<20 || boot.UsedBytes == 0 || boot.UsedBytes > boot.TotalBytes:
		t.Errorf("boot partition sizes: used %d, total %d (a 64 MiB partition with a kernel on it)", boot.UsedBytes, boot.TotalBytes)
	case len(boot.Disks) != 1 || boot.Disks[0].BusType != "virtio":
		t.Errorf("boot partition disks: %v, want one virtio disk", boot.Disks)
	}
}
