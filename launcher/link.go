package launcher

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/launcher/cmdline"
)

// SetLinkState sets the link of the guest NIC of a VMI interface up or down
// (QMP set_link on its device: the guest sees its carrier come and go),
// KubeVirt's interfaces[].state on a running VMI. The domain's interface
// reports it (Interface.LinkDown).
func (l *Launcher) SetLinkState(ctx context.Context, iface string, up bool) error {
	found := false
	for _, i := range l.vmi.Spec.Domain.Devices.Interfaces {
		found = found || i.Name == iface
	}
	if !found {
		return fmt.Errorf("launcher: set link: no interface %q in spec.domain.devices.interfaces", iface)
	}
	if l.mon == nil {
		return fmt.Errorf("launcher: set link %s: QEMU is not connected", iface)
	}
	if err := l.mon.SetLink(ctx, cmdline.NICDeviceID(iface), up); err != nil {
		return fmt.Errorf("launcher: set link %s: %w", iface, err)
	}
	l.state.handle(event{kind: evLink, message: iface, on: up})
	klog.InfoS("Interface link set", "interface", iface, "up", up, "vmi", klog.KObj(l.vmi))
	return nil
}

// initialLinks sets down, before the guest runs, every NIC whose
// interfaces[].state is down (QEMU starts every link up).
func (l *Launcher) initialLinks(ctx context.Context) error {
	for _, i := range l.vmi.Spec.Domain.Devices.Interfaces {
		if i.State == v1.InterfaceStateLinkDown {
			if err := l.SetLinkState(ctx, i.Name, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// withLink is ifaces with the named one's link down or up (a copy: the
// state machine's domains are values); a NIC not wired on the pod network
// (kemuctl run's) is not among them.
func withLink(ifaces []Interface, name string, down bool) []Interface {
	out := append([]Interface(nil), ifaces...)
	for i := range out {
		if out[i].Name == name {
			out[i].LinkDown = down
		}
	}
	return out
}
