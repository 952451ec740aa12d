package cmdserver

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/launcher"
	"github.com/kemu-dev/kemu/launcher/rpc"
)

// linkTimeout bounds one set_link.
const linkTimeout = 10 * time.Second

// linkChange is an interface whose link a Sync turns up or down.
type linkChange struct {
	name string
	up   bool
}

// linkChanges: interfaces[].state may change on a running VM (KubeVirt's
// link state). It returns the changes from cur to next and clears the
// states in both specs, so that what else differs is refused. Only when
// both have the same interfaces in the same order.
func linkChanges(cur, next *v1.VirtualMachineInstanceSpec) []linkChange {
	a, b := cur.Domain.Devices.Interfaces, next.Domain.Devices.Interfaces
	if len(a) != len(b) {
		return nil
	}
	for i := range a {
		if a[i].Name != b[i].Name {
			return nil
		}
	}
	var out []linkChange
	for i := range a {
		was, is := a[i].State != v1.InterfaceStateLinkDown, b[i].State != v1.InterfaceStateLinkDown
		if was != is {
			out = append(out, linkChange{name: b[i].Name, up: is})
		}
		a[i].State, b[i].State = "", ""
	}
	return out
}

// applyLinks sets the changed links (the VM runs or is paused).
func (s *Server) applyLinks(l *launcher.Launcher, links []linkChange) error {
	for _, c := range links {
		if err := s.setLink(l, c.name, c.up); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) setLink(l *launcher.Launcher, name string, up bool) error {
	if st := l.Domain().State; st != launcher.StateRunning && st != launcher.StatePaused {
		return status.Errorf(codes.FailedPrecondition, "set link %s: the domain is %s", name, st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), linkTimeout)
	defer cancel()
	return toStatus("set link", l, l.SetLinkState(ctx, name, up))
}

// SetLinkState sets a VMI interface's link up or down (needs Running or
// Paused).
func (s *Server) SetLinkState(_ context.Context, req *rpc.SetLinkStateRequest) (*rpc.Empty, error) {
	var up bool
	switch req.GetState() {
	case rpc.LinkState_LINK_STATE_UP:
		up = true
	case rpc.LinkState_LINK_STATE_DOWN:
	default:
		return nil, status.Errorf(codes.InvalidArgument, "set link: state %v: up or down", req.GetState())
	}
	l, err := s.need("set link", launcher.StateRunning, launcher.StatePaused)
	if err != nil {
		return nil, err
	}
	return &rpc.Empty{}, s.setLink(l, req.GetInterface(), up)
}

// linkState is the domain interface's link for the wire.
func linkState(i launcher.Interface) rpc.LinkState {
	if i.LinkDown {
		return rpc.LinkState_LINK_STATE_DOWN
	}
	return rpc.LinkState_LINK_STATE_UP
}
