package metrics

import (
	"context"

	"google.golang.org/grpc"

	"github.com/kemu-dev/kemu/launcher/rpc"
)

// StatsClient is the one RPC the collector makes.
type StatsClient interface {
	GetStats(ctx context.Context, in *rpc.Empty, opts ...grpc.CallOption) (*rpc.StatsResponse, error)
}

// Target is one VMI's current launcher on this node.
type Target struct {
	Namespace, Name string
	// UID is the VMI's: the cache's key (a VMI deleted and created again
	// under its name is another).
	UID    string
	Client StatsClient
	Info   Info
}

// Info are kemu_vmi_info's labels beyond namespace, name and node. The
// guest's figures come from its agent: untrusted, cut to maxLabelLen.
type Info struct {
	Phase                string
	MachineType          string
	GuestOSName          string
	GuestOSVersionID     string
	GuestOSKernelRelease string
	GuestOSMachine       string
}
