//go:build qemu

package cgroup

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/kemu-dev/kemu/qmp"
	"github.com/kemu-dev/kemu/test/testguest"
)

// TestTapNeedsTunInAllowlist: QEMU opening a tap itself (-netdev
// tap,ifname=) goes through /dev/net/tun. In a cgroup whose allowlist
// lacks tun it fails and says which device; with tun allowed the same
// command line runs. (The launcher hands QEMU tap fds it opened itself, so
// QEMU never needs tun there; the rule matters for QEMU opening taps.)
func TestTapNeedsTunInAllowlist(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatalf("QEMU (bash hack/install-deps.sh): %v", err)
	}
	name := fmt.Sprintf("kt%d", os.Getpid()%100000)
	tap := &netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: name}, Mode: netlink.TUNTAP_MODE_TAP,
		Flags: netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR}
	if err := netlink.LinkAdd(tap); err != nil {
		t.Fatalf("creating tap %s: %v", name, err)
	}
	// Persistent: the link outlives the fds netlink opened to create it.
	for _, f := range tap.Fds {
		_ = f.Close()
	}
	t.Cleanup(func() { _ = netlink.LinkDel(tap) })

	withoutTun, err := Default(false, false, false)
	if err != nil {
		t.Fatal(err)
	}
	withTun, err := Default(false, true, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		allow Allowlist
		ok    bool
	}{
		{"without tun", withoutTun, false},
		{"with tun", withTun, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Create("", fmt.Sprintf("kemu-test-%d-tap-%v", os.Getpid(), tc.ok), tc.allow)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = g.Remove() })
			fd, _ := g.FD()
			sock := filepath.Join(t.TempDir(), "qmp.sock")
			cmd := exec.Command("qemu-system-x86_64", "-machine", "none", "-nodefaults", "-display", "none",
				"-netdev", "tap,id=n0,ifname="+name+",script=no,downscript=no,vnet_hdr=on",
				"-qmp", "unix:"+sock+",server=on,wait=off")
			out := &testguest.SyncBuffer{}
			cmd.Stdout, cmd.Stderr = out, out
			cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd, Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })

			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if !tc.ok {
				select {
				case err := <-exited:
					exited <- err
					msg := out.String()
					if err == nil || !strings.Contains(msg, "/dev/net/tun") || !strings.Contains(msg, "Operation not permitted") {
						t.Fatalf("QEMU without tun in its allowlist: %v, output %q; want a failure naming /dev/net/tun", err, msg)
					}
					t.Logf("QEMU refused as expected: %s", strings.TrimSpace(msg))
				case <-ctx.Done():
					t.Fatal("QEMU kept running without tun in its allowlist")
				}
				return
			}
			// QMP greets only once QEMU's initialisation (netdevs included) is done.
			m, err := qmp.Dial(ctx, sock)
			if err != nil {
				t.Fatalf("QEMU with tun allowed: %v; output %q", err, out.String())
			}
			defer m.Close()
			if err := m.Quit(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				exited <- err
				if err != nil {
					t.Fatalf("QEMU exit: %v, output %q", err, out.String())
				}
			case <-ctx.Done():
				t.Fatal("QEMU did not quit")
			}
		})
	}
}
