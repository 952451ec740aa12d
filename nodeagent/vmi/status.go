package vmi

import (
	"fmt"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/vmistatus"
	"github.com/kemu-dev/kemu/launcher/rpc"
)

// Domain states and reasons the launcher reports: the command API's enums
// (launcher/rpc), under short names.
const (
	stateStarting     = rpc.DomainState_Starting
	stateRunning      = rpc.DomainState_Running
	statePaused       = rpc.DomainState_Paused
	stateShuttingDown = rpc.DomainState_ShuttingDown
	stateShutoff      = rpc.DomainState_Shutoff
	stateMigrating    = rpc.DomainState_Migrating

	domainReasonUser          = rpc.DomainReason_User
	domainReasonIOError       = rpc.DomainReason_IOError
	domainReasonStartPaused   = rpc.DomainReason_StartStrategyPaused
	domainReasonMigration     = rpc.DomainReason_Migration
	domainReasonGuestShutdown = rpc.DomainReason_GuestShutdown
	domainReasonHostRequest   = rpc.DomainReason_HostRequest
	domainReasonCrashed       = rpc.DomainReason_Crashed
	domainReasonFailedToStart = rpc.DomainReason_FailedToStart
	domainReasonGuestPanicked = rpc.DomainReason_GuestPanicked
	domainReasonMigrated      = rpc.DomainReason_Migrated
)

// Reasons the node agent writes into status.reason and its conditions.
const (
	// Phase reasons (status.reason).
	ReasonGuestShutdown = "GuestShutdown" // Succeeded: the guest powered off
	ReasonCrashed       = "Crashed"       // QEMU ended on its own, not by a guest power-off
	ReasonFailedToStart = "FailedToStart" // QEMU never ran the guest
	ReasonKilled        = "Killed"        // the host stopped QEMU (quit/SIGKILL) before the guest powered off
	ReasonGuestPanicked = "GuestPanicked" // the guest panicked and QEMU ended
	ReasonStopped       = "Stopped"       // Shutoff for a reason kemu does not know
	ReasonLauncherGone  = "LauncherGone"  // the launcher vanished without a final state

	// Condition reasons.
	ReasonPausedByUser    = "PausedByUser"
	ReasonPausedIOError   = "PausedIOError"
	ReasonPausedStart     = "PausedStartStrategy"
	ReasonPausedMigration = "PausedMigration"
	ReasonPausedUnknown   = "PausedUnknown"
	ReasonNotRunning      = "GuestNotRunning" // Ready False while starting or shutting down
	ReasonPaused          = "Paused"          // Ready False while paused
	// Ready False with a readinessProbe: the launcher Pod is not ready
	// (KubeVirt copies the Pod's reason), or has no Ready condition
	// (KubeVirt's PodConditionMissing).
	ReasonReadinessProbe      = "ReadinessProbeFailed"
	ReasonPodConditionMissing = "PodConditionMissing"
	ReasonTCG                 = "TCG"            // SoftwareEmulation True
	ReasonDeviceCgroup        = "DeviceCgroup"   // DevicesConfined True
	ReasonNoDeviceCgroup      = "NoDeviceCgroup" // DevicesConfined False
	ReasonSynced              = "Synced"         // Synchronized True
	ReasonSyncFailed          = "SyncFailed"     // Synchronized False: the launcher refused the VMI
	ReasonAgentConnected      = "AgentConnected"
	InfoSourceDomain          = "domain"
	InfoSourceGuestAgent      = "guest-agent"
	InfoSourceDomainAndAgnt   = "domain, guest-agent"
)

// SELinuxNone is status.selinuxContext when QEMU runs without a label.
const SELinuxNone = "none"

// Caps on what the guest agent reports into a VMI's status
// (status.guestOSInfo, status.interfaces): the guest is untrusted, and the
// VMI object (etcd, every watcher) must stay small whatever it claims.
// docs/nodeagent.md lists them.
const (
	// MaxGuestString bounds each string the guest reports (every
	// guestOSInfo field, an interface's name, MAC and each address), in
	// bytes; longer ones are cut on a UTF-8 boundary (invalid UTF-8 becomes
	// U+FFFD first).
	MaxGuestString = 256
	// MaxGuestInterfaces bounds the interfaces only the guest agent reports
	// (the VMI's own interfaces, matched by MAC, are always listed).
	MaxGuestInterfaces = 32
	// MaxGuestIPs bounds the addresses taken from the guest agent for one
	// interface.
	MaxGuestIPs = 16
)

// guestString applies MaxGuestString.
func guestString(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= MaxGuestString {
		return s
	}
	i := MaxGuestString
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// guestIPs strips the prefix lengths of the agent's addresses and applies
// MaxGuestIPs and MaxGuestString.
func guestIPs(ips []string) []string {
	out := stripPrefixes(ips[:min(len(ips), MaxGuestIPs)])
	for i := range out {
		out[i] = guestString(out[i])
	}
	return out
}

// Observation is what the node agent knows about one VMI's launcher; the
// input of ApplyStatus.
type Observation struct {
	// Domain is the latest state from WatchDomain (or an RPC answer); nil
	// until the first one arrives.
	Domain *rpc.Domain
	// Guest is the last GuestInfo answer while the agent is connected; nil
	// when not fetched (yet) in this process.
	Guest *rpc.GuestInfoResponse
	// LauncherVersion is Info's launcher_version.
	LauncherVersion string
	// Synced: Sync succeeded on this launcher. SyncError: it failed, and
	// the launcher does not run what the VMI asks (FailedPrecondition, ...).
	Synced    bool
	SyncError string
	// Gone is set when the launcher vanished (Pod, socket or process gone)
	// without reporting a final state: the message.
	Gone string
	// PodReady is the launcher Pod's Ready condition (nil: none, or no
	// Pod): the VMI's Ready condition follows it while the guest runs when
	// the VMI has a readinessProbe (the Pod's compute container carries it).
	PodReady *corev1.PodCondition
	// Pod is the launcher Pod as the node agent's cache has it (nil: none):
	// whether it is being deleted, and its reason, decide how a VM stopped
	// by a signal ends (kube/vmistatus.KubeletStop).
	Pod *corev1.Pod
	// Now stamps transitions.
	Now metav1.Time
}

// running is the set of states in which QEMU runs the guest.
func running(state rpc.DomainState) bool {
	switch state {
	case stateRunning, statePaused, stateShuttingDown, stateMigrating:
		return true
	}
	return false
}

// ApplyStatus updates the node agent's part of a VMI's status from what it
// observed: phase (Running, Succeeded, Failed; never Pending or Scheduled),
// reason, phase transition timestamps, the conditions Ready, Paused,
// AgentConnected, SoftwareEmulation, DevicesConfined and Synchronized (its
// own reasons), interfaces, guestOSInfo and selinuxContext. Fields the
// controller owns are not touched, and a final VMI is left alone. It is
// idempotent: applied twice to the same observation, nothing changes (no
// timestamps move), so the caller writes only real changes.
func ApplyStatus(vmi *v1.VirtualMachineInstance, o Observation) {
	st := &vmi.Status
	if st.Phase.IsFinal() {
		return
	}
	if o.Synced || o.SyncError != "" {
		syncedCondition(vmi, o)
	}
	if o.Gone != "" && (o.Domain == nil || o.Domain.GetState() != stateShutoff) {
		finish(vmi, v1.Failed, ReasonLauncherGone, o.Gone, o.Now)
		return
	}
	d := o.Domain
	if d == nil {
		return
	}
	switch state := d.GetState(); {
	case state == stateShutoff && d.GetReason() == domainReasonMigrated:
		// The source launcher ended because the guest runs on the
		// migration's target: the VMI lives on (the controller moves it).
		return
	case state == stateShutoff:
		phase, reason := finalPhase(d)
		msg := d.GetMessage()
		if d.GetExited() && !strings.Contains(msg, "status") {
			msg = strings.TrimSpace(fmt.Sprintf("%s (QEMU exit code %d)", msg, d.GetExitCode()))
		}
		if sig := d.GetStopSignal(); sig != "" && (reason == ReasonGuestShutdown || reason == ReasonKilled) && !vmistatus.Deleting(vmi, o.Pod) {
			// The kubelet stopped the launcher on its own (a failed
			// livenessProbe, an eviction): not the guest's choice, and no
			// deletion asked for it.
			how := "the guest powered off"
			if reason == ReasonKilled {
				how = "the guest did not power off in time and QEMU was stopped"
			}
			phase = v1.Failed
			reason, msg = vmistatus.KubeletStop(vmi, o.Pod, fmt.Sprintf("the launcher got %s (%s: %s)", guestString(sig), how, msg))
		}
		finish(vmi, phase, reason, msg, o.Now)
		return
	case running(state):
		if st.Phase != v1.Running {
			setPhase(vmi, v1.Running, o.Now)
			st.Reason = ""
		}
		readyCondition(vmi, d, o.PodReady, o.Now)
	case state == stateStarting:
		// Still Scheduled: nothing to report but the accelerator.
	}

	pausedCondition(vmi, d, o.Now)
	if d.GetAgentConnected() {
		setCondition(vmi, v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstanceAgentConnected,
			Status: corev1.ConditionTrue, Reason: ReasonAgentConnected}, o.Now)
	} else {
		removeCondition(vmi, v1.VirtualMachineInstanceAgentConnected)
	}
	switch d.GetAccelerator() {
	case "tcg":
		msg := "the guest runs under TCG (software emulation): KVM is not available"
		if v := d.GetQemuVersion(); v != "" {
			msg = "QEMU " + v + ": " + msg
		}
		setCondition(vmi, v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstanceSoftwareEmulation,
			Status: corev1.ConditionTrue, Reason: ReasonTCG, Message: msg}, o.Now)
	case "":
	default:
		removeCondition(vmi, v1.VirtualMachineInstanceSoftwareEmulation)
	}
	if !running(d.GetState()) {
		return
	}
	if cg := d.GetDeviceCgroup(); cg != "" {
		setCondition(vmi, v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstanceDevicesConfined,
			Status: corev1.ConditionTrue, Reason: ReasonDeviceCgroup, Message: "QEMU runs in device cgroup " + cg}, o.Now)
	} else {
		setCondition(vmi, v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstanceDevicesConfined,
			Status: corev1.ConditionFalse, Reason: ReasonNoDeviceCgroup,
			Message: "QEMU runs without its cgroup v2 device allowlist"}, o.Now)
	}
	st.SelinuxContext = d.GetSelinuxContext()
	if st.SelinuxContext == "" {
		st.SelinuxContext = SELinuxNone
	}
	if d.GetAgentConnected() && o.Guest == nil {
		// Not asked yet in this process (a restarted node agent): keep what
		// an earlier run reported instead of flapping.
		return
	}
	var guest *rpc.GuestInfoResponse
	if d.GetAgentConnected() {
		guest = o.Guest
		st.GuestOSInfo = guestOSInfo(guest)
	}
	st.Interfaces = Interfaces(d.GetInterfaces(), guest)
}

// finalPhase maps a Shutoff domain to Succeeded (the guest powered off) or
// Failed with a reason.
func finalPhase(d *rpc.Domain) (v1.VirtualMachineInstancePhase, string) {
	switch d.GetReason() {
	case domainReasonGuestShutdown:
		return v1.Succeeded, ReasonGuestShutdown
	case domainReasonCrashed:
		return v1.Failed, ReasonCrashed
	case domainReasonFailedToStart:
		return v1.Failed, ReasonFailedToStart
	case domainReasonHostRequest:
		return v1.Failed, ReasonKilled
	case domainReasonGuestPanicked:
		return v1.Failed, ReasonGuestPanicked
	}
	return v1.Failed, ReasonStopped
}

// finish moves the VMI to a final phase: Ready False with the reason, no
// Paused or AgentConnected.
func finish(vmi *v1.VirtualMachineInstance, phase v1.VirtualMachineInstancePhase, reason, msg string, now metav1.Time) {
	setPhase(vmi, phase, now)
	vmi.Status.Reason = reason
	setCondition(vmi, v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstanceReady,
		Status: corev1.ConditionFalse, Reason: reason, Message: msg}, now)
	removeCondition(vmi, v1.VirtualMachineInstancePaused)
	removeCondition(vmi, v1.VirtualMachineInstanceAgentConnected)
}

// readyCondition: False while paused or shutting down; otherwise True, or,
// for a VMI with a readinessProbe, the launcher Pod's Ready condition
// (KubeVirt's syncReadyConditionFromPod): the probe's verdict.
func readyCondition(vmi *v1.VirtualMachineInstance, d *rpc.Domain, podReady *corev1.PodCondition, now metav1.Time) {
	c := v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue}
	switch {
	case d.GetState() == statePaused:
		c.Status, c.Reason, c.Message = corev1.ConditionFalse, ReasonPaused, "the guest is paused"
	case d.GetState() == stateShuttingDown:
		c.Status, c.Reason, c.Message = corev1.ConditionFalse, ReasonNotRunning, "the guest is shutting down"
	case vmi.Spec.ReadinessProbe == nil:
	case podReady == nil:
		c.Status, c.Reason, c.Message = corev1.ConditionFalse, ReasonPodConditionMissing, "the launcher Pod has no Ready condition yet"
	case podReady.Status != corev1.ConditionTrue:
		c.Status, c.Reason, c.Message = corev1.ConditionFalse, ReasonReadinessProbe, "the readinessProbe fails (the launcher Pod is not ready)"
		if podReady.Reason != "" {
			c.Message += ": " + guestString(podReady.Reason)
		}
	}
	setCondition(vmi, c, now)
}

func pausedCondition(vmi *v1.VirtualMachineInstance, d *rpc.Domain, now metav1.Time) {
	if d.GetState() != statePaused {
		removeCondition(vmi, v1.VirtualMachineInstancePaused)
		return
	}
	reason := ReasonPausedUnknown
	switch d.GetReason() {
	case domainReasonUser:
		reason = ReasonPausedByUser
	case domainReasonIOError:
		reason = ReasonPausedIOError
	case domainReasonStartPaused:
		reason = ReasonPausedStart
	case domainReasonMigration:
		reason = ReasonPausedMigration
	}
	setCondition(vmi, v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstancePaused,
		Status: corev1.ConditionTrue, Reason: reason, Message: d.GetMessage()}, now)
}

// syncedCondition: True with the launcher, QEMU and accelerator (KubeVirt
// has no status field for them), False when the launcher refused the VMI.
func syncedCondition(vmi *v1.VirtualMachineInstance, o Observation) {
	c := v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstanceSynchronized}
	if o.SyncError != "" {
		c.Status, c.Reason, c.Message = corev1.ConditionFalse, ReasonSyncFailed, o.SyncError
	} else {
		c.Status, c.Reason = corev1.ConditionTrue, ReasonSynced
		var parts []string
		if d := o.Domain; d != nil && d.GetQemuVersion() != "" {
			parts = append(parts, "QEMU "+d.GetQemuVersion())
		}
		if d := o.Domain; d != nil && d.GetAccelerator() != "" {
			parts = append(parts, "accelerator "+d.GetAccelerator())
		}
		if o.LauncherVersion != "" {
			parts = append(parts, "launcher "+o.LauncherVersion)
		}
		c.Message = strings.Join(parts, ", ")
	}
	setCondition(vmi, c, o.Now)
}

// guestOSInfo is the agent's view of the OS, capped (MaxGuestString).
func guestOSInfo(g *rpc.GuestInfoResponse) v1.VirtualMachineInstanceGuestOSInfo {
	return v1.VirtualMachineInstanceGuestOSInfo{
		Name: guestString(g.GetOsName()), KernelRelease: guestString(g.GetKernelRelease()),
		Version: guestString(g.GetOsVersion()), PrettyName: guestString(g.GetOsPrettyName()),
		VersionID: guestString(g.GetOsVersionId()), KernelVersion: guestString(g.GetKernelVersion()),
		Machine: guestString(g.GetMachine()), ID: guestString(g.GetOsId()),
	}
}

// Interfaces merges the launcher's view of the guest's NICs (the VMI
// interface names, MACs and the pod IPs the cluster reaches them on) with
// the guest agent's (the names inside the guest and the guest's own
// addresses), matched by MAC. A NIC both know is "domain, guest-agent" and
// keeps the domain's IPs when it has any (masquerade: the guest's 10.0.2.2
// is not reachable from the cluster); NICs only the agent reports (not
// loopback) follow with "guest-agent", at most MaxGuestInterfaces of them.
// Addresses drop their prefix length. What comes from the agent is capped
// (MaxGuestString, MaxGuestIPs).
func Interfaces(dom []*rpc.DomainInterface, guest *rpc.GuestInfoResponse) []v1.VirtualMachineInstanceNetworkInterface {
	byMAC := map[string]*rpc.GuestInterface{}
	for _, g := range guest.GetInterfaces() {
		if g.GetMac() != "" {
			byMAC[strings.ToLower(g.GetMac())] = g
		}
	}
	used := map[*rpc.GuestInterface]bool{}
	var out []v1.VirtualMachineInstanceNetworkInterface
	for _, d := range dom {
		i := v1.VirtualMachineInstanceNetworkInterface{Name: d.GetName(), MAC: d.GetMac(), InfoSource: InfoSourceDomain,
			LinkState: linkState(d.GetLinkState())}
		i.IPAddresses = stripPrefixes(d.GetIpAddresses())
		if g := byMAC[strings.ToLower(d.GetMac())]; g != nil && d.GetMac() != "" {
			used[g] = true
			i.InterfaceName, i.InfoSource = guestString(g.GetName()), InfoSourceDomainAndAgnt
			if len(i.IPAddresses) == 0 {
				i.IPAddresses = guestIPs(g.GetIpAddresses())
			}
		}
		if len(i.IPAddresses) > 0 {
			i.IPAddress = i.IPAddresses[0]
		}
		out = append(out, i)
	}
	agentOnly := 0
	for _, g := range guest.GetInterfaces() {
		if used[g] || g.GetName() == "lo" || isLoopbackOnly(g) {
			continue
		}
		if agentOnly++; agentOnly > MaxGuestInterfaces {
			break
		}
		i := v1.VirtualMachineInstanceNetworkInterface{MAC: guestString(g.GetMac()), InterfaceName: guestString(g.GetName()),
			InfoSource: InfoSourceGuestAgent, IPAddresses: guestIPs(g.GetIpAddresses())}
		if len(i.IPAddresses) > 0 {
			i.IPAddress = i.IPAddresses[0]
		}
		out = append(out, i)
	}
	return out
}

func isLoopbackOnly(g *rpc.GuestInterface) bool {
	if len(g.GetIpAddresses()) == 0 {
		return strings.Trim(g.GetMac(), "0:") == ""
	}
	for _, ip := range g.GetIpAddresses() {
		if !strings.HasPrefix(ip, "127.") && !strings.HasPrefix(ip, "::1/") && ip != "::1" {
			return false
		}
	}
	return true
}

func stripPrefixes(ips []string) []string {
	if len(ips) == 0 {
		return nil
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		if i := strings.IndexByte(ip, '/'); i >= 0 {
			ip = ip[:i]
		}
		out = append(out, ip)
	}
	return out
}

// setPhase, setCondition and removeCondition record the node agent's
// changes with the shared VMI status helpers (kube/vmistatus).
func setPhase(vmi *v1.VirtualMachineInstance, phase v1.VirtualMachineInstancePhase, now metav1.Time) {
	vmistatus.SetPhase(vmi, phase, now)
}

func setCondition(vmi *v1.VirtualMachineInstance, cond v1.VirtualMachineInstanceCondition, now metav1.Time) {
	vmistatus.SetCondition(vmi, cond, now)
}

func removeCondition(vmi *v1.VirtualMachineInstance, typ v1.VirtualMachineInstanceConditionType) {
	vmistatus.RemoveCondition(vmi, typ)
}

// linkState is KubeVirt's status.interfaces[].linkState: up or down ("":
// a launcher that does not say).
func linkState(s rpc.LinkState) string {
	switch s {
	case rpc.LinkState_LINK_STATE_UP:
		return string(v1.InterfaceStateLinkUp)
	case rpc.LinkState_LINK_STATE_DOWN:
		return string(v1.InterfaceStateLinkDown)
	}
	return ""
}
