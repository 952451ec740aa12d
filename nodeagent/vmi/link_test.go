package vmi

import (
	"testing"

	"github.com/kemu-dev/kemu/launcher/rpc"
)

// status.interfaces[].linkState is the launcher's link state of the NIC.
func TestInterfacesLinkState(t *testing.T) {
	for _, tc := range []struct {
		in   rpc.LinkState
		want string
	}{
		{rpc.LinkState_LINK_STATE_UP, "up"},
		{rpc.LinkState_LINK_STATE_DOWN, "down"},
		{rpc.LinkState_LINK_STATE_UNSPECIFIED, ""},
	} {
		got := Interfaces([]*rpc.DomainInterface{{Name: "default", Mac: "02:00:00:00:00:01", LinkState: tc.in}}, nil)
		if len(got) != 1 || got[0].LinkState != tc.want {
			t.Errorf("%v: interfaces %+v, want linkState %q", tc.in, got, tc.want)
		}
	}
}
