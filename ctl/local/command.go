// Package local is kemuctl run: one VirtualMachineInstance on this machine,
// without a cluster, in the foreground (the launcher, its command server for
// kemuctl shell, and the stop loop of launcher/signals).
package local

import (
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/kemu-dev/kemu/api/launcherpod"
)

type Options struct {
	dir, imageCache, accel, probeCache string
	probeKernel, probeInitrd           string
	console, waitAgent, noDeviceCgroup bool
	allowRawQMP                        bool
	timeout, agentTimeout              time.Duration
	then                               []string
	publish                            []string
	serialLog, junit                   string
	// vmState is the VM's backend storage (launcher.Config.VMStateDir).
	vmState string
}

// NewCommand is kemuctl run.
func NewCommand() *cobra.Command {
	o := Options{}
	cmd := &cobra.Command{
		Use:   "run [flags] VMI.yaml",
		Short: "Run a VirtualMachineInstance on this machine, without a cluster",
		Long: `run validates the VMI and runs it in the foreground with kemu's launcher:
QEMU is started paused, connected over QMP and resumed; every state change is
printed. Ctrl-C presses the ACPI power button and waits the VMI's
terminationGracePeriodSeconds before stopping QEMU; a second Ctrl-C stops it at
once (files are cleaned up either way).

The pod network (masquerade) becomes QEMU user networking; --publish forwards
host ports to the guest. containerDisk and kernelBoot images are read from
oci:DIR, oci-archive:FILE, docker-archive:FILE or a registry, cached.

--then runs actions once the guest is up (after --wait-agent): pause, unpause,
agent, shutdown, stop, sleep=DURATION, and the CI steps, through the guest
agent: exec=COMMAND (run with /bin/sh -c in the guest, its stdout and stderr
copied to kemuctl's as they arrive), copy-in=HOST:GUEST (the host file to the
guest path) and copy-out=HOST:GUEST (the guest file to the host path; the host
path comes first in both). exec=, copy-in= and copy-out= take the rest of
their --then argument, commas included. A failed CI step does not stop the
others; after the last step the guest is shut down (unless the last step is
shutdown or stop). --junit writes a JUnit test case per exec, --serial-log
the guest's serial console as it arrives.

kemuctl shell on the printed launcher socket sends only read-only QMP
commands (query-*) unless --allow-raw-qmp is given, which also keeps QEMU's
second QMP socket for a debugging client.

Exit status: 0 the guest powered off (and every CI step passed); 1 failed to
start or crashed, or a CI step failed (an exec exited non-zero or could not
run, a copy failed); 2 bad input; 3 stopped by the host (grace period over,
--timeout, second Ctrl-C, a failed non-CI action).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runVMI(cmd, args[0], o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", "", "runtime directory (default: a new one under $TMPDIR)")
	f.StringVar(&o.imageCache, "image-cache", defaultCacheDir("images"), "cache of container image files")
	f.StringVar(&o.accel, "accel", "", `accelerator: kvm, tcg, or "" to probe KVM`)
	f.StringVar(&o.probeCache, "kvm-probe-cache", defaultCacheDir("kvm-probe.json"), "where the KVM probe's verdict is cached")
	f.StringVar(&o.probeKernel, "kvm-probe-kernel", "", `kernel of the guest the KVM probe boots, with --kvm-probe-initrd (its init prints "KEMU-GUEST ready"; default: the host's own kernel with a generated initramfs, else kemu's built-in probe guest)`)
	f.StringVar(&o.probeInitrd, "kvm-probe-initrd", "", "initramfs of the guest the KVM probe boots, with --kvm-probe-kernel")
	f.BoolVar(&o.console, "console", false, "attach the serial console to this terminal")
	f.BoolVar(&o.waitAgent, "wait-agent", false, "wait for the guest agent to answer")
	f.DurationVar(&o.agentTimeout, "agent-timeout", 3*time.Minute, "how long --wait-agent waits")
	f.DurationVar(&o.timeout, "timeout", 0, "shut the VM down gracefully after this long (0: never)")
	f.Var(thenValue{&o.then}, "then", "actions after start: pause, unpause, agent, shutdown, stop, sleep=DURATION, exec=COMMAND, copy-in=HOST:GUEST, copy-out=HOST:GUEST")
	f.StringVar(&o.serialLog, "serial-log", "", "write the guest's serial console to this file as it arrives")
	f.StringVar(&o.junit, "junit", "", "write a JUnit report of the --then exec steps to this file")
	f.StringVar(&o.vmState, "vm-state", "", "the VM's backend storage, a directory kept across runs: a persistent TPM (domain.devices.tpm.persistent) keeps swtpm's state in its swtpm/ (a launcher Pod's persistent-state-for-<vm> claim); empty: a persistent TPM is refused")
	f.BoolVar(&o.noDeviceCgroup, "no-device-cgroup", false, "run QEMU without its cgroup v2 device allowlist (hosts without cgroup2)")
	f.StringSliceVar(&o.publish, "publish", nil, "forward a host port to the guest: [ADDR:]HOSTPORT:GUESTPORT[/udp]")
	f.BoolVar(&o.allowRawQMP, launcherpod.FlagAllowRawQMP, false, "debugging: let kemuctl shell send any QMP command and keep QEMU's second QMP socket (default: read-only commands, no second socket)")
	return cmd
}

// defaultCacheDir is the user's cache; for root /var/cache/kemu, because
// QEMU runs as its own user (launcher/unpriv) and cannot traverse /root to
// read cached images.
func defaultCacheDir(name string) string {
	if os.Geteuid() == 0 {
		return filepath.Join("/var/cache/kemu", name)
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "kemu", name)
}
