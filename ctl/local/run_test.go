package local

import (
	"strings"
	"testing"

	"github.com/kemu-dev/kemu/ctl/cli"
	"github.com/kemu-dev/kemu/ctl/cli/clitest"
	"github.com/kemu-dev/kemu/launcher/cmdline"
)

func TestParsePublish(t *testing.T) {
	for in, want := range map[string]cmdline.Forward{
		"2222:22":             {Proto: "tcp", HostAddr: "127.0.0.1", HostPort: 2222, GuestPort: 22},
		"0.0.0.0:8080:80/tcp": {Proto: "tcp", HostAddr: "0.0.0.0", HostPort: 8080, GuestPort: 80},
		"5353:53/udp":         {Proto: "udp", HostAddr: "127.0.0.1", HostPort: 5353, GuestPort: 53},
	} {
		got, err := parsePublish(in)
		if err != nil || got != want {
			t.Errorf("%s: %+v %v", in, got, err)
		}
	}
	for _, bad := range []string{"22", "a:22", "1:2:3:4", "host:1:2", "70000:22", "22:22/sctp"} {
		if _, err := parsePublish(bad); err == nil || !strings.Contains(err.Error(), "--publish") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

func TestCheckAction(t *testing.T) {
	for _, ok := range []string{"pause", "unpause", "agent", "shutdown", "stop", "sleep=2s",
		"exec=uname -a", "exec=printf 'a,b'", "copy-in=x.txt:/tmp/x", "copy-out=out/x:/tmp/x"} {
		if err := checkAction(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"reboot", "sleep=soon", "", "exec=", "exec= ", "copy-in=x", "copy-in=:/tmp/x",
		"copy-out=x:", "copy-out=x:tmp/rel"} {
		if err := checkAction(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestRunRejectsBadInputBeforeStarting(t *testing.T) {
	for name, tt := range map[string]struct{ yaml, want string }{
		"invalid VMI": {"apiVersion: kemu.dev/v1alpha1\nkind: VirtualMachineInstance\nmetadata: {name: x}\nspec:\n  domain: {memory: {guest: 8Mi}, devices: {}}\n", "spec.domain.memory.guest"},
		"bridge binding": {`apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: x}
spec:
  domain:
    memory: {guest: 64Mi}
    devices: {interfaces: [{name: default, bridge: {}}]}
  networks: [{name: default, pod: {}}]
`, "masquerade binding only"},
		"multiqueue": {`apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: x}
spec:
  domain:
    memory: {guest: 64Mi}
    devices: {networkInterfaceMultiqueue: true, interfaces: [{name: default, masquerade: {}}]}
  networks: [{name: default, pod: {}}]
`, "spec.domain.devices.networkInterfaceMultiqueue"},
		"a VM": {`apiVersion: kemu.dev/v1alpha1
kind: VirtualMachine
metadata: {name: x}
spec:
  template: {spec: {domain: {memory: {guest: 64Mi}, devices: {}}}}
`, "want exactly one"},
	} {
		t.Run(name, func(t *testing.T) {
			_, stderr, code := run(t, tt.yaml, "run", "-")
			if code != 2 || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tt.want)
			}
		})
	}
	if _, stderr, code := run(t, "", "run", "--then", "dance", "../../examples/standalone/vmi-testguest.yaml"); code != 2 || !strings.Contains(stderr, "dance") {
		t.Errorf("bad --then: exit %d %q", code, stderr)
	}
}

// run executes kemuctl run with args and stdin, returning stdout, stderr and
// the exit status main would use.
func run(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return clitest.Run(t, cli.Root(cli.Name, cli.NewCluster(), NewCommand()), stdin, args...)
}
