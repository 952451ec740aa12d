package main

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/controller/template"
	"github.com/kemu-dev/kemu/launcher/rpc"
)

// The launcher Pod passes the VMI's UID (the template's flag is the one
// kemu-launcher defines); the launcher reports it in Info and Syncs no
// other VMI; a --vmi-json of another VMI is a bad flag (exit 2).
func TestVMIUIDFlag(t *testing.T) {
	in := &v1.VirtualMachineInstance{}
	in.Name, in.Namespace, in.UID = "vm1", "ns", "3f2c9a4e-1d2b-4c5d-8e9f-0a1b2c3d4e5f"
	in.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "root"}}
	in.Spec.Volumes = []v1.Volume{{Name: "root", ContainerDisk: &v1.ContainerDiskSource{Image: "example.com/disk:1"}}}
	v1.SetVirtualMachineInstanceDefaults(in)
	pod, err := template.NewService(template.Options{LauncherImage: "kemu.local/launcher:test"}).Render(template.Input{VMI: in})
	if err != nil {
		t.Fatal(err)
	}
	flag := "--" + launcherpod.FlagVMIUID + "=" + string(in.UID)
	if !slices.Contains(pod.Spec.Containers[0].Args, flag) {
		t.Fatalf("the launcher Pod's args %v lack %s", pod.Spec.Containers[0].Args, flag)
	}

	bin := buildLauncher(t)
	dir := shortDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--sockets-dir", filepath.Join(dir, "s"), "--runtime-dir", filepath.Join(dir, "run"),
		"--qemu-timeout", "50s", flag)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "s", "launcher.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rpc.NewLauncherClient(conn)
	var info *rpc.InfoResponse
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		info, err = c.Info(ctx, &rpc.InfoRequest{SupportedVersions: []string{"v1"}})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the launcher never answered: %v", err)
	}
	if info.GetVmiUid() != string(in.UID) {
		t.Errorf("Info vmi_uid %q, want %q", info.GetVmiUid(), in.UID)
	}
	_, err = c.Sync(ctx, &rpc.SyncRequest{VmiJson: []byte(`{"apiVersion":"kemu.dev/v1alpha1","kind":"VirtualMachineInstance",
		"metadata":{"name":"vm2","namespace":"ns","uid":"0a0a0a0a-0000-4000-8000-000000000000"},
		"spec":{"domain":{"memory":{"guest":"64Mi"},"devices":{"disks":[{"name":"root","disk":{"bus":"virtio"}}]}},
		"volumes":[{"name":"root","containerDisk":{"image":"oci:nowhere"}}]}}`)})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), string(in.UID)) ||
		!strings.Contains(err.Error(), "0a0a0a0a-0000-4000-8000-000000000000") {
		t.Errorf("Sync of another VMI: %v, want FailedPrecondition naming both UIDs", err)
	}

	out, err := exec.Command(bin, "--sockets-dir", filepath.Join(dir, "s2"), flag, "--vmi-json",
		`{"apiVersion":"kemu.dev/v1alpha1","kind":"VirtualMachineInstance","metadata":{"name":"x","uid":"other"},
		"spec":{"domain":{"memory":{"guest":"64Mi"},"devices":{"disks":[{"name":"root","disk":{"bus":"virtio"}}]}},
		"volumes":[{"name":"root","containerDisk":{"image":"oci:nowhere"}}]}}`).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), launcherpod.FlagVMIUID) {
		t.Errorf("--vmi-json of another VMI: %v, want exit 2\n%s", err, out)
	}
}
