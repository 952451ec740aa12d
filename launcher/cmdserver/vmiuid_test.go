package cmdserver_test

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kemu-dev/kemu/launcher/cmdserver"
	"github.com/kemu-dev/kemu/launcher/rpc"
)

// A launcher started for one VMI (--vmi-uid) reports it in Info and
// refuses to Sync any other, before anything starts; a standalone one
// reports none.
func TestVMIUID(t *testing.T) {
	const vmi = `{"apiVersion": "kemu.dev/v1alpha1", "kind": "VirtualMachineInstance",
		"metadata": {"name": "other", "namespace": "ns", %s},
		"spec": {"domain": {"memory": {"guest": "64Mi"}, "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}},
		  "volumes": [{"name": "root", "containerDisk": {"image": "oci:nowhere"}}]}}`
	for _, tc := range []struct {
		name, serverUID, vmiMeta string
		wantInfo                 string
		wantErr                  []string
	}{
		{name: "standalone", wantInfo: ""},
		{name: "another VMI", serverUID: "uid-a", vmiMeta: `"uid": "uid-b"`, wantInfo: "uid-a",
			wantErr: []string{`"uid-a"`, `"uid-b"`, "metadata.uid", "ns/other"}},
		{name: "a VMI without a UID", serverUID: "uid-a", vmiMeta: `"labels": {}`, wantInfo: "uid-a",
			wantErr: []string{`"uid-a"`, `uid ""`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, cmdserver.Options{SocketsDir: shortDir(t), VMIUID: types.UID(tc.serverUID)})
			c, _ := dial(t, s.Socket())
			ctx := ctxFor(t, rpcTimeout)
			info, err := c.Info(ctx, &rpc.InfoRequest{SupportedVersions: []string{"v1"}})
			if err != nil {
				t.Fatal(err)
			}
			if info.GetVmiUid() != tc.wantInfo {
				t.Errorf("Info vmi_uid %q, want %q", info.GetVmiUid(), tc.wantInfo)
			}
			if tc.wantErr == nil {
				return
			}
			_, err = c.Sync(ctx, &rpc.SyncRequest{VmiJson: []byte(fmt.Sprintf(vmi, tc.vmiMeta))})
			wantCode(t, err, codes.FailedPrecondition, tc.wantErr...)
			if s.Launcher() != nil {
				t.Error("a launcher was created for another VMI")
			}
			_, err = c.GetDomain(ctx, &rpc.Empty{})
			wantCode(t, err, codes.FailedPrecondition, "Sync first")
		})
	}
}
