package vmi

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/vmistatus"
	"github.com/kemu-dev/kemu/launcher/rpc"
)

var (
	t0 = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 = metav1.NewTime(t0.Add(time.Minute))
)

func cond(typ v1.VirtualMachineInstanceConditionType, status corev1.ConditionStatus, reason string) v1.VirtualMachineInstanceCondition {
	return v1.VirtualMachineInstanceCondition{Type: typ, Status: status, Reason: reason}
}

func TestApplyStatus(t *testing.T) {
	runningDom := &rpc.Domain{State: rpc.DomainState_Running, Reason: rpc.DomainReason_Booted, Seq: 3, Accelerator: "tcg", QemuVersion: "7.2.0", QemuPid: 42}
	withAgent := &rpc.Domain{State: rpc.DomainState_Running, Reason: rpc.DomainReason_Booted, Seq: 4, Accelerator: "kvm", QemuPid: 42, AgentConnected: true,
		DeviceCgroup: "/sys/fs/cgroup/kemu/qemu", SelinuxContext: "system_u:system_r:svirt_t:s0:c1,c2",
		Interfaces: []*rpc.DomainInterface{{Name: "default", Mac: "02:00:00:00:00:01", IpAddresses: []string{"10.244.0.5"},
			GuestIp: "10.0.2.2/24", InfoSource: "domain"}}}
	guest := &rpc.GuestInfoResponse{OsId: "kemu", OsName: "kemu test guest", KernelRelease: "6.1.0", Interfaces: []*rpc.GuestInterface{
		{Name: "lo", Mac: "00:00:00:00:00:00", IpAddresses: []string{"127.0.0.1/8"}},
		{Name: "eth0", Mac: "02:00:00:00:00:01", IpAddresses: []string{"10.0.2.2/24"}},
		{Name: "eth1", Mac: "02:00:00:00:00:02", IpAddresses: []string{"192.168.1.2/24", "fe80::1/64"}},
	}}
	scheduled := v1.VirtualMachineInstanceStatus{Phase: v1.Scheduled, NodeName: "n1", LauncherPod: "p",
		PhaseTransitionTimestamps: []v1.VirtualMachineInstancePhaseTransitionTimestamp{{Phase: v1.Scheduled, PhaseTransitionTimestamp: t0}}}

	tests := []struct {
		name           string
		status         v1.VirtualMachineInstanceStatus
		obs            Observation
		phase          v1.VirtualMachineInstancePhase
		reason         string
		conds          []v1.VirtualMachineInstanceCondition // type, status, reason (in order)
		ifaces         []v1.VirtualMachineInstanceNetworkInterface
		os             string
		selinux        string
		newTransitions int
	}{
		{name: "no domain yet: nothing", status: scheduled, obs: Observation{}, phase: v1.Scheduled},
		{name: "starting: still Scheduled, emulation known", status: scheduled,
			obs:   Observation{Domain: &rpc.Domain{State: rpc.DomainState_Starting, Accelerator: "tcg"}},
			phase: v1.Scheduled, conds: []v1.VirtualMachineInstanceCondition{cond(v1.VirtualMachineInstanceSoftwareEmulation, "True", ReasonTCG)}},
		{name: "running under tcg without device cgroup", status: scheduled, obs: Observation{Domain: runningDom, Synced: true, LauncherVersion: "dev"},
			phase: v1.Running, newTransitions: 1, selinux: "none",
			conds: []v1.VirtualMachineInstanceCondition{
				cond(v1.VirtualMachineInstanceSynchronized, "True", ReasonSynced),
				cond(v1.VirtualMachineInstanceReady, "True", ""),
				cond(v1.VirtualMachineInstanceSoftwareEmulation, "True", ReasonTCG),
				cond(v1.VirtualMachineInstanceDevicesConfined, "False", ReasonNoDeviceCgroup),
			}},
		{name: "agent connected, guest info merged by MAC", status: scheduled, obs: Observation{Domain: withAgent, Guest: guest},
			phase: v1.Running, newTransitions: 1, selinux: "system_u:system_r:svirt_t:s0:c1,c2", os: "kemu test guest",
			conds: []v1.VirtualMachineInstanceCondition{
				cond(v1.VirtualMachineInstanceReady, "True", ""),
				cond(v1.VirtualMachineInstanceAgentConnected, "True", ReasonAgentConnected),
				cond(v1.VirtualMachineInstanceDevicesConfined, "True", ReasonDeviceCgroup),
			},
			ifaces: []v1.VirtualMachineInstanceNetworkInterface{
				{Name: "default", MAC: "02:00:00:00:00:01", IPAddress: "10.244.0.5", IPAddresses: []string{"10.244.0.5"},
					InterfaceName: "eth0", InfoSource: "domain, guest-agent"},
				{MAC: "02:00:00:00:00:02", IPAddress: "192.168.1.2", IPAddresses: []string{"192.168.1.2", "fe80::1"},
					InterfaceName: "eth1", InfoSource: "guest-agent"},
			}},
		{name: "agent connected, not asked yet: keep earlier guest data", obs: Observation{Domain: withAgent},
			status: v1.VirtualMachineInstanceStatus{Phase: v1.Running, GuestOSInfo: v1.VirtualMachineInstanceGuestOSInfo{Name: "old"},
				Interfaces: []v1.VirtualMachineInstanceNetworkInterface{{Name: "old"}}},
			phase: v1.Running, os: "old", selinux: "system_u:system_r:svirt_t:s0:c1,c2",
			ifaces: []v1.VirtualMachineInstanceNetworkInterface{{Name: "old"}},
			conds: []v1.VirtualMachineInstanceCondition{
				cond(v1.VirtualMachineInstanceReady, "True", ""),
				cond(v1.VirtualMachineInstanceAgentConnected, "True", ReasonAgentConnected),
				cond(v1.VirtualMachineInstanceDevicesConfined, "True", ReasonDeviceCgroup),
			}},
		{name: "paused by the user", obs: Observation{Domain: &rpc.Domain{State: rpc.DomainState_Paused, Reason: rpc.DomainReason_User, Accelerator: "kvm"}},
			status: v1.VirtualMachineInstanceStatus{Phase: v1.Running, Conditions: []v1.VirtualMachineInstanceCondition{
				cond(v1.VirtualMachineInstanceAgentConnected, "True", ReasonAgentConnected)}},
			phase: v1.Running, selinux: "none", conds: []v1.VirtualMachineInstanceCondition{
				cond(v1.VirtualMachineInstanceReady, "False", ReasonPaused),
				cond(v1.VirtualMachineInstancePaused, "True", ReasonPausedByUser),
				cond(v1.VirtualMachineInstanceDevicesConfined, "False", ReasonNoDeviceCgroup),
			}},
		{name: "paused on an I/O error", obs: Observation{Domain: &rpc.Domain{State: rpc.DomainState_Paused, Reason: rpc.DomainReason_IOError, DeviceCgroup: "x"}},
			status: v1.VirtualMachineInstanceStatus{Phase: v1.Running}, phase: v1.Running, selinux: "none",
			conds: []v1.VirtualMachineInstanceCondition{
				cond(v1.VirtualMachineInstanceReady, "False", ReasonPaused),
				cond(v1.VirtualMachineInstancePaused, "True", ReasonPausedIOError),
				cond(v1.VirtualMachineInstanceDevicesConfined, "True", ReasonDeviceCgroup),
			}},
		{name: "guest powered off: Succeeded",
			obs: Observation{Domain: &rpc.Domain{State: rpc.DomainState_Shutoff, Reason: rpc.DomainReason_GuestShutdown, Exited: true, Message: "QEMU exited with status 0"}},
			status: v1.VirtualMachineInstanceStatus{Phase: v1.Running, Conditions: []v1.VirtualMachineInstanceCondition{
				cond(v1.VirtualMachineInstanceAgentConnected, "True", ReasonAgentConnected),
				cond(v1.VirtualMachineInstanceReady, "True", "")}},
			phase: v1.Succeeded, reason: ReasonGuestShutdown, newTransitions: 1,
			conds: []v1.VirtualMachineInstanceCondition{cond(v1.VirtualMachineInstanceReady, "False", ReasonGuestShutdown)}},
		{name: "crashed", obs: Observation{Domain: &rpc.Domain{State: rpc.DomainState_Shutoff, Reason: rpc.DomainReason_Crashed, Exited: true, ExitCode: 1}},
			status: v1.VirtualMachineInstanceStatus{Phase: v1.Running}, phase: v1.Failed, reason: ReasonCrashed, newTransitions: 1,
			conds: []v1.VirtualMachineInstanceCondition{cond(v1.VirtualMachineInstanceReady, "False", ReasonCrashed)}},
		{name: "failed to start", obs: Observation{Domain: &rpc.Domain{State: rpc.DomainState_Shutoff, Reason: rpc.DomainReason_FailedToStart}},
			status: scheduled, phase: v1.Failed, reason: ReasonFailedToStart, newTransitions: 1,
			conds: []v1.VirtualMachineInstanceCondition{cond(v1.VirtualMachineInstanceReady, "False", ReasonFailedToStart)}},
		{name: "stopped by the host after the grace period", obs: Observation{Domain: &rpc.Domain{State: rpc.DomainState_Shutoff, Reason: rpc.DomainReason_HostRequest}},
			status: v1.VirtualMachineInstanceStatus{Phase: v1.Running}, phase: v1.Failed, reason: ReasonKilled, newTransitions: 1,
			conds: []v1.VirtualMachineInstanceCondition{cond(v1.VirtualMachineInstanceReady, "False", ReasonKilled)}},
		{name: "launcher gone", obs: Observation{Domain: runningDom, Gone: "launcher gone: connection refused"},
			status: v1.VirtualMachineInstanceStatus{Phase: v1.Running}, phase: v1.Failed, reason: ReasonLauncherGone, newTransitions: 1,
			conds: []v1.VirtualMachineInstanceCondition{cond(v1.VirtualMachineInstanceReady, "False", ReasonLauncherGone)}},
		{name: "gone after a final state: the final state wins",
			obs:    Observation{Domain: &rpc.Domain{State: rpc.DomainState_Shutoff, Reason: rpc.DomainReason_GuestShutdown}, Gone: "socket gone"},
			status: v1.VirtualMachineInstanceStatus{Phase: v1.Running}, phase: v1.Succeeded, reason: ReasonGuestShutdown, newTransitions: 1,
			conds: []v1.VirtualMachineInstanceCondition{cond(v1.VirtualMachineInstanceReady, "False", ReasonGuestShutdown)}},
		{name: "final stays final", obs: Observation{Domain: runningDom},
			status: v1.VirtualMachineInstanceStatus{Phase: v1.Failed, Reason: "PodVanished"}, phase: v1.Failed, reason: "PodVanished"},
		{name: "sync refused", obs: Observation{SyncError: "cannot change while the VM runs: spec.domain.memory"},
			status: scheduled, phase: v1.Scheduled,
			conds: []v1.VirtualMachineInstanceCondition{cond(v1.VirtualMachineInstanceSynchronized, "False", ReasonSyncFailed)}},
		{name: "kvm drops SoftwareEmulation", obs: Observation{Domain: &rpc.Domain{State: rpc.DomainState_Running, Accelerator: "kvm", DeviceCgroup: "x"}},
			status: v1.VirtualMachineInstanceStatus{Phase: v1.Running, SelinuxContext: "none", Conditions: []v1.VirtualMachineInstanceCondition{
				cond(v1.VirtualMachineInstanceSoftwareEmulation, "True", ReasonTCG),
				cond(v1.VirtualMachineInstancePaused, "True", ReasonPausedByUser)}},
			phase: v1.Running, selinux: "none", conds: []v1.VirtualMachineInstanceCondition{
				cond(v1.VirtualMachineInstanceReady, "True", ""),
				cond(v1.VirtualMachineInstanceDevicesConfined, "True", ReasonDeviceCgroup),
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := &v1.VirtualMachineInstance{Status: *tt.status.DeepCopy()}
			tt.obs.Now = t1
			ApplyStatus(vmi, tt.obs)
			st := vmi.Status
			if st.Phase != tt.phase || st.Reason != tt.reason {
				t.Errorf("phase %s reason %q, want %s %q", st.Phase, st.Reason, tt.phase, tt.reason)
			}
			if n := len(st.PhaseTransitionTimestamps) - len(tt.status.PhaseTransitionTimestamps); n != tt.newTransitions {
				t.Errorf("%d new phase transitions, want %d", n, tt.newTransitions)
			}
			var got []v1.VirtualMachineInstanceCondition
			for _, c := range st.Conditions {
				got = append(got, cond(c.Type, c.Status, c.Reason))
			}
			// Compare as sets of (type, status, reason).
			want := map[v1.VirtualMachineInstanceCondition]bool{}
			for _, c := range tt.conds {
				want[c] = true
			}
			if len(got) != len(tt.conds) {
				t.Errorf("conditions %v, want %v", got, tt.conds)
			} else {
				for _, c := range got {
					if !want[c] {
						t.Errorf("conditions %v, want %v", got, tt.conds)
						break
					}
				}
			}
			if !equality.Semantic.DeepEqual(st.Interfaces, tt.ifaces) {
				t.Errorf("interfaces %+v, want %+v", st.Interfaces, tt.ifaces)
			}
			if st.GuestOSInfo.Name != tt.os {
				t.Errorf("guestOSInfo.name %q, want %q", st.GuestOSInfo.Name, tt.os)
			}
			if st.SelinuxContext != tt.selinux {
				t.Errorf("selinuxContext %q, want %q", st.SelinuxContext, tt.selinux)
			}
			// Idempotent: a second pass later changes nothing, not even times.
			again := vmi.DeepCopy()
			o := tt.obs
			o.Now = metav1.NewTime(t1.Add(time.Hour))
			ApplyStatus(again, o)
			if !equality.Semantic.DeepEqual(again.Status, vmi.Status) {
				t.Errorf("second pass changed the status:\n%+v\n%+v", vmi.Status, again.Status)
			}
		})
	}
}

// Condition times: the transition time moves only when the status does.
func TestConditionTimes(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{Status: v1.VirtualMachineInstanceStatus{Phase: v1.Running}}
	ApplyStatus(vmi, Observation{Domain: &rpc.Domain{State: rpc.DomainState_Running}, Now: t0})
	ApplyStatus(vmi, Observation{Domain: &rpc.Domain{State: rpc.DomainState_Paused, Reason: rpc.DomainReason_User}, Now: t1})
	for _, c := range vmi.Status.Conditions {
		if c.Type == v1.VirtualMachineInstanceReady && (c.Status != "False" || !c.LastTransitionTime.Equal(&t1)) {
			t.Errorf("Ready %+v, want False since t1", c)
		}
	}
	if len(vmi.Status.PhaseTransitionTimestamps) != 0 {
		t.Errorf("phase transitions %v on a Running VMI staying Running", vmi.Status.PhaseTransitionTimestamps)
	}
}

func TestSyncedMessage(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{Status: v1.VirtualMachineInstanceStatus{Phase: v1.Scheduled}}
	ApplyStatus(vmi, Observation{Synced: true, LauncherVersion: "v0.1", Now: t0,
		Domain: &rpc.Domain{State: rpc.DomainState_Running, QemuVersion: "7.2.0", Accelerator: "tcg"}})
	for _, c := range vmi.Status.Conditions {
		if c.Type == v1.VirtualMachineInstanceSynchronized {
			if c.Message != "QEMU 7.2.0, accelerator tcg, launcher v0.1" {
				t.Errorf("Synchronized message %q", c.Message)
			}
			return
		}
	}
	t.Error("no Synchronized condition")
}

func TestGuestString(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{name: "short", in: "Debian GNU/Linux 12", want: "Debian GNU/Linux 12"},
		{name: "exactly the cap", in: strings.Repeat("a", MaxGuestString), want: strings.Repeat("a", MaxGuestString)},
		{name: "ascii over", in: strings.Repeat("a", MaxGuestString+1), want: strings.Repeat("a", MaxGuestString)},
		// "é" is 2 bytes, "€" 3: the cut backs off to the rune start.
		{name: "2-byte runes", in: strings.Repeat("é", MaxGuestString), want: strings.Repeat("é", MaxGuestString/2)},
		{name: "3-byte rune across the cut", in: strings.Repeat("a", MaxGuestString-1) + "€", want: strings.Repeat("a", MaxGuestString-1)},
		{name: "invalid UTF-8", in: "ok\xff\xfe", want: "ok\uFFFD"},
		{name: "huge", in: strings.Repeat("x", 1<<20), want: strings.Repeat("x", MaxGuestString)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := guestString(tc.in)
			if got != tc.want || !utf8.ValidString(got) || len(got) > MaxGuestString {
				t.Errorf("got %q (%d bytes), want %q", got, len(got), tc.want)
			}
		})
	}
}

// A hostile guest agent cannot grow the VMI: strings, interfaces and
// addresses are capped; the VMI's own interfaces stay whatever the agent
// lists before them.
func TestGuestInfoCapped(t *testing.T) {
	long := strings.Repeat("x", 10*MaxGuestString)
	var ips []string
	for i := range 100 {
		ips = append(ips, fmt.Sprintf("10.0.%d.%d/24", i/250, i%250))
	}
	var junk []*rpc.GuestInterface
	for i := range 1000 {
		junk = append(junk, &rpc.GuestInterface{Name: long, Mac: fmt.Sprintf("02:00:00:00:%02x:%02x", i/256, i%256), IpAddresses: ips})
	}
	dom := []*rpc.DomainInterface{{Name: "default", Mac: "52:54:00:00:00:01"}}
	guest := &rpc.GuestInfoResponse{OsName: long, OsPrettyName: long, KernelRelease: long, KernelVersion: long,
		OsVersion: long, OsVersionId: long, Machine: long, OsId: long, Hostname: long,
		Interfaces: append(junk, &rpc.GuestInterface{Name: "eth0", Mac: "52:54:00:00:00:01", IpAddresses: ips})}

	vmi := &v1.VirtualMachineInstance{Status: v1.VirtualMachineInstanceStatus{Phase: v1.Running}}
	ApplyStatus(vmi, Observation{Domain: &rpc.Domain{State: rpc.DomainState_Running, AgentConnected: true, Interfaces: dom}, Guest: guest, Now: t0})
	st := vmi.Status

	osi := st.GuestOSInfo
	for field, v := range map[string]string{"name": osi.Name, "prettyName": osi.PrettyName, "kernelRelease": osi.KernelRelease,
		"kernelVersion": osi.KernelVersion, "version": osi.Version, "versionId": osi.VersionID, "machine": osi.Machine, "id": osi.ID} {
		if len(v) != MaxGuestString {
			t.Errorf("guestOSInfo.%s is %d bytes, want %d", field, len(v), MaxGuestString)
		}
	}
	if len(st.Interfaces) != 1+MaxGuestInterfaces {
		t.Fatalf("%d interfaces, want the VMI's one and %d from the agent", len(st.Interfaces), MaxGuestInterfaces)
	}
	if i := st.Interfaces[0]; i.Name != "default" || i.InterfaceName != "eth0" || i.InfoSource != InfoSourceDomainAndAgnt ||
		len(i.IPAddresses) != MaxGuestIPs || i.IPAddress != "10.0.0.0" {
		t.Errorf("the VMI's interface: %+v", i)
	}
	for _, i := range st.Interfaces[1:] {
		if len(i.InterfaceName) != MaxGuestString || len(i.IPAddresses) != MaxGuestIPs || i.InfoSource != InfoSourceGuestAgent {
			t.Errorf("agent interface: name %d bytes, %d addresses, source %q", len(i.InterfaceName), len(i.IPAddresses), i.InfoSource)
			break
		}
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	// 1000 interfaces × 100 addresses × ~2.5 KiB of names before the caps.
	if len(b) > 64<<10 {
		t.Errorf("the status is %d bytes", len(b))
	}
	t.Logf("status with a hostile agent: %d bytes", len(b))
}

// A VM the launcher shut down on a signal (stopSignal) while neither the
// VMI nor its Pod was being deleted fails, with the kubelet's cause; a
// deletion (of either) ends as the guest ended; a guest's own power-off
// and a crash keep their outcome.
func TestSignaledStop(t *testing.T) {
	del := metav1.NewTime(t0.Time)
	off := func(reason rpc.DomainReason, sig string) *rpc.Domain {
		return &rpc.Domain{State: rpc.DomainState_Shutoff, Reason: reason, Exited: true, Message: "QEMU exited with status 0", StopSignal: sig}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-x"}}
	podDeleting := pod.DeepCopy()
	podDeleting.DeletionTimestamp = &del
	evicted := pod.DeepCopy()
	evicted.Status.Reason, evicted.Status.Message = "Evicted", "The node was low on resource: memory."
	for _, tt := range []struct {
		name        string
		liveness    bool
		vmiDeleting bool
		dom         *rpc.Domain
		pod         *corev1.Pod
		phase       v1.VirtualMachineInstancePhase
		reason      string
		msgHas      string
	}{
		{"liveness kill, the guest powered off", true, false, off(rpc.DomainReason_GuestShutdown, "SIGTERM"), pod,
			v1.Failed, vmistatus.ReasonLivenessProbeFailed, "the launcher got SIGTERM (the guest powered off: QEMU exited with status 0) while neither"},
		{"liveness kill, grace over", true, false, off(rpc.DomainReason_HostRequest, "SIGTERM"), pod,
			v1.Failed, vmistatus.ReasonLivenessProbeFailed, "did not power off in time"},
		{"eviction: the Pod's reason", true, false, off(rpc.DomainReason_GuestShutdown, "SIGTERM"), evicted,
			v1.Failed, "Evicted", "low on resource"},
		{"no livenessProbe, nothing said", false, false, off(rpc.DomainReason_GuestShutdown, "SIGTERM"), pod,
			v1.Failed, vmistatus.ReasonLauncherTerminated, "no livenessProbe"},
		{"no Pod in the cache", true, false, off(rpc.DomainReason_GuestShutdown, "SIGTERM"), nil,
			v1.Failed, vmistatus.ReasonLivenessProbeFailed, ""},
		{"VMI deleted: as the guest ended", true, true, off(rpc.DomainReason_GuestShutdown, "SIGTERM"), pod,
			v1.Succeeded, ReasonGuestShutdown, ""},
		{"VMI deleted, grace over: Killed", true, true, off(rpc.DomainReason_HostRequest, "SIGTERM"), pod,
			v1.Failed, ReasonKilled, ""},
		{"Pod deleted: as the guest ended", true, false, off(rpc.DomainReason_GuestShutdown, "SIGTERM"), podDeleting,
			v1.Succeeded, ReasonGuestShutdown, ""},
		{"no signal: the guest's own power-off", true, false, off(rpc.DomainReason_GuestShutdown, ""), pod,
			v1.Succeeded, ReasonGuestShutdown, ""},
		{"signal, then a crash: Crashed", true, false, off(rpc.DomainReason_Crashed, "SIGTERM"), pod,
			v1.Failed, ReasonCrashed, ""},
		{"signal while running: nothing final yet", true, false,
			&rpc.Domain{State: rpc.DomainState_ShuttingDown, Reason: rpc.DomainReason_ACPIPowerdown, StopSignal: "SIGTERM"}, pod,
			v1.Running, "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vmi := &v1.VirtualMachineInstance{Status: v1.VirtualMachineInstanceStatus{Phase: v1.Running, LauncherPod: "virt-launcher-x"}}
			if tt.liveness {
				vmi.Spec.LivenessProbe = &v1.Probe{}
			}
			if tt.vmiDeleting {
				vmi.DeletionTimestamp = &del
			}
			o := Observation{Domain: tt.dom, Pod: tt.pod, Now: t1}
			ApplyStatus(vmi, o)
			st := vmi.Status
			if st.Phase != tt.phase || st.Reason != tt.reason {
				t.Fatalf("phase %s reason %q, want %s %q", st.Phase, st.Reason, tt.phase, tt.reason)
			}
			ready, _ := vmistatus.Condition(vmi, v1.VirtualMachineInstanceReady)
			if tt.phase.IsFinal() && (ready.Reason != tt.reason || !strings.Contains(ready.Message, tt.msgHas)) {
				t.Errorf("Ready %s %q, want reason %s and %q in the message", ready.Reason, ready.Message, tt.reason, tt.msgHas)
			}
			if evs := transitionEvents(&v1.VirtualMachineInstance{Status: v1.VirtualMachineInstanceStatus{Phase: v1.Running}}, vmi); tt.phase == v1.Failed &&
				(len(evs) == 0 || !strings.HasPrefix(evs[len(evs)-1].msg, tt.reason+": ")) {
				t.Errorf("events %+v, want one naming %s", evs, tt.reason)
			}
			// Idempotent: a later pass on the same observation changes nothing.
			again := vmi.DeepCopy()
			o.Now = metav1.NewTime(t1.Add(time.Hour))
			ApplyStatus(again, o)
			if !equality.Semantic.DeepEqual(again.Status, vmi.Status) {
				t.Errorf("second pass changed the status:\n%+v\n%+v", vmi.Status, again.Status)
			}
		})
	}
}
