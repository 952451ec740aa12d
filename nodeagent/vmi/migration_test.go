package vmi

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/launcher/rpc"
)

func dom(state rpc.DomainState, reason rpc.DomainReason, m *rpc.MigrationState) *rpc.Domain {
	return &rpc.Domain{State: state, Reason: reason, Migration: m}
}

// Which step the target role takes for a (migrationState, domain) pair.
func TestTargetAction(t *testing.T) {
	now := metav1.Now()
	base := func(f func(*v1.VirtualMachineInstanceMigrationState)) *v1.VirtualMachineInstanceMigrationState {
		ms := &v1.VirtualMachineInstanceMigrationState{MigrationUID: "m1", TargetPod: "tgt", SourceNode: "a", TargetNode: "b"}
		if f != nil {
			f(ms)
		}
		return ms
	}
	waiting := dom(statePaused, domainReasonMigration, nil)
	for _, tc := range []struct {
		name     string
		ms       *v1.VirtualMachineInstanceMigrationState
		pod      string
		d        *rpc.Domain
		prepared bool
		want     targetStep
	}{
		{"no migration", nil, "tgt", nil, false, targetCleanup},
		{"another Pod's migration", base(nil), "other", nil, false, targetCleanup},
		{"failed", base(func(m *v1.VirtualMachineInstanceMigrationState) { m.Failed = true }), "tgt", waiting, true, targetCleanup},
		{"ended", base(func(m *v1.VirtualMachineInstanceMigrationState) { m.EndTimestamp = &now }), "tgt", nil, true, targetCleanup},
		{"new: prepare", base(nil), "tgt", nil, false, targetPrepare},
		{"prepared: announce", base(nil), "tgt", waiting, true, targetAnnounce},
		{"announced: wait", base(func(m *v1.VirtualMachineInstanceMigrationState) { m.TargetNodeAddress = "10.0.0.2" }), "tgt", waiting, true, targetNone},
		{"running on the target: ready", base(func(m *v1.VirtualMachineInstanceMigrationState) { m.TargetNodeAddress = "x" }), "tgt",
			dom(stateRunning, rpc.DomainReason_Migrated, nil), true, targetReady},
		{"ready written: nothing", base(func(m *v1.VirtualMachineInstanceMigrationState) { m.TargetNodeDomainReadyTimestamp = &now }), "tgt",
			dom(stateRunning, rpc.DomainReason_Migrated, nil), true, targetNone},
		{"target ended before ready: fail", base(func(m *v1.VirtualMachineInstanceMigrationState) { m.TargetNodeAddress = "x" }), "tgt",
			dom(stateShutoff, rpc.DomainReason_MigrationFailed, nil), true, targetFail},
		{"waiting but not registered here (restart): fail", base(func(m *v1.VirtualMachineInstanceMigrationState) { m.TargetNodeAddress = "x" }), "tgt",
			waiting, false, targetFail},
		{"starting: wait", base(nil), "tgt", dom(stateStarting, 0, nil), false, targetNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := targetAction(tc.ms, tc.pod, tc.d, tc.prepared); got != tc.want {
				t.Errorf("targetAction = %d, want %d", got, tc.want)
			}
		})
	}
}

// Which step the source role takes for a (migrationState, domain) pair.
func TestSourceAction(t *testing.T) {
	start := metav1.NewTime(time.Unix(1000, 0))
	now := metav1.Now()
	ms := func(f func(*v1.VirtualMachineInstanceMigrationState)) *v1.VirtualMachineInstanceMigrationState {
		m := &v1.VirtualMachineInstanceMigrationState{MigrationUID: "m1", SourceNode: "a", TargetNode: "b"}
		if f != nil {
			f(m)
		}
		return m
	}
	ready := func(m *v1.VirtualMachineInstanceMigrationState) { m.TargetNodeAddress = "10.0.0.2" }
	started := func(m *v1.VirtualMachineInstanceMigrationState) { ready(m); m.StartTimestamp = &start }
	this := &rpc.MigrationState{StartedUnixNano: start.UnixNano() + 5e8, Status: "active"}
	earlier := &rpc.MigrationState{StartedUnixNano: start.UnixNano() - 1e9, Status: "failed"}
	done := &rpc.MigrationState{StartedUnixNano: start.UnixNano(), Status: "completed"}
	running := dom(stateRunning, rpc.DomainReason_Booted, nil)
	for _, tc := range []struct {
		name       string
		ms         *v1.VirtualMachineInstanceMigrationState
		d          *rpc.Domain
		cancelSent bool
		want       sourceStep
	}{
		{"no migration", nil, running, false, sourceCleanup},
		{"target not ready yet", ms(nil), running, false, sourceNone},
		{"target ready, running: migrate", ms(ready), running, false, sourceMigrate},
		{"target ready, paused: migrate", ms(ready), dom(statePaused, domainReasonUser, nil), false, sourceMigrate},
		{"target ready, shutting down: no", ms(ready), dom(stateShuttingDown, 0, nil), false, sourceNone},
		{"target failed before start", ms(func(m *v1.VirtualMachineInstanceMigrationState) { ready(m); m.Failed = true }), running, false, sourceCleanup},
		{"abort before start", ms(func(m *v1.VirtualMachineInstanceMigrationState) { ready(m); m.AbortRequested = true }), running, false, sourceAborted},
		{"Migrate under way (no startTimestamp yet)", ms(ready), dom(stateMigrating, domainReasonMigration, nil), false, sourceNone},
		{"migrating: progress", ms(started), dom(stateMigrating, domainReasonMigration, this), false, sourceProgress},
		{"completed", ms(started), dom(stateMigrating, domainReasonMigration, done), false, sourceComplete},
		{"completed written, target not ready: wait", ms(func(m *v1.VirtualMachineInstanceMigrationState) { started(m); m.Completed = true }),
			dom(stateMigrating, domainReasonMigration, done), false, sourceNone},
		{"target ready: finalize", ms(func(m *v1.VirtualMachineInstanceMigrationState) {
			started(m)
			m.Completed, m.TargetNodeDomainReadyTimestamp = true, &now
		}), dom(stateMigrating, domainReasonMigration, done), false, sourceFinalize},
		{"finalized: cleanup", ms(func(m *v1.VirtualMachineInstanceMigrationState) {
			started(m)
			m.Completed, m.TargetNodeDomainReadyTimestamp = true, &now
		}), dom(stateShutoff, rpc.DomainReason_Migrated, done), false, sourceCleanup},
		{"abort while migrating: cancel", ms(func(m *v1.VirtualMachineInstanceMigrationState) { started(m); m.AbortRequested = true }),
			dom(stateMigrating, domainReasonMigration, this), false, sourceCancel},
		{"failed by the controller while migrating: cancel", ms(func(m *v1.VirtualMachineInstanceMigrationState) { started(m); m.Failed = true }),
			dom(stateMigrating, domainReasonMigration, this), false, sourceCancel},
		{"cancel sent: progress", ms(func(m *v1.VirtualMachineInstanceMigrationState) { started(m); m.AbortRequested = true }),
			dom(stateMigrating, domainReasonMigration, this), true, sourceProgress},
		{"back running after failure: fail", ms(started), dom(stateRunning, rpc.DomainReason_MigrationFailed, this), false, sourceFail},
		{"back running after cancel: fail", ms(started), dom(stateRunning, rpc.DomainReason_MigrationCanceled, this), false, sourceFail},
		{"failure written: cleanup", ms(func(m *v1.VirtualMachineInstanceMigrationState) { started(m); m.Failed = true }),
			dom(stateRunning, rpc.DomainReason_MigrationFailed, this), false, sourceCleanup},
		{"an earlier migration's failure is not this one's", ms(started), dom(stateRunning, rpc.DomainReason_MigrationFailed, earlier), false, sourceNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sourceAction(tc.ms, tc.d, tc.cancelSent); got != tc.want {
				t.Errorf("sourceAction = %d, want %d", got, tc.want)
			}
		})
	}
}

// The LiveMigratable condition and its reasons.
func TestLiveMigratable(t *testing.T) {
	vmi := func(ifaces []v1.Interface, vols ...v1.Volume) *v1.VirtualMachineInstance {
		v := &v1.VirtualMachineInstance{}
		v.Spec.Networks = []v1.Network{{Name: "default", Pod: &v1.PodNetwork{}}}
		v.Spec.Domain.Devices.Interfaces = ifaces
		v.Spec.Volumes = vols
		return v
	}
	masq := []v1.Interface{{Name: "default", Masquerade: &v1.InterfaceMasquerade{}}}
	pvc := func(name, claim string, ro bool) v1.Volume {
		return v1.Volume{Name: name, PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: ro}}
	}
	eph := func(name, claim string) v1.Volume {
		return v1.Volume{Name: name, Ephemeral: &v1.EphemeralVolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
	}
	rwx := pvcInfo{modes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}}
	rwo := pvcInfo{modes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}
	rox := pvcInfo{modes: []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany}}
	for _, tc := range []struct {
		name    string
		vmi     *v1.VirtualMachineInstance
		pvcs    map[string]pvcInfo
		status  corev1.ConditionStatus
		reason  string
		message string // a part of it
	}{
		{"masquerade, no disks", vmi(masq), nil, corev1.ConditionTrue, "", ""},
		{"bridge on the pod network", vmi([]v1.Interface{{Name: "default", Bridge: &v1.InterfaceBridge{}}}), nil,
			corev1.ConditionFalse, ReasonInterfaceNotLiveMigratable, "interface default"},
		{"RWX PVC", vmi(masq, pvc("data", "c1", false)), map[string]pvcInfo{"c1": rwx}, corev1.ConditionTrue, "", ""},
		{"RWX PVC shared with virtiofs", func() *v1.VirtualMachineInstance {
			v := vmi(masq, pvc("data", "c1", false))
			v.Spec.Domain.Devices.Filesystems = []v1.Filesystem{{Name: "data", Virtiofs: &v1.FilesystemVirtiofs{}}}
			return v
		}(), map[string]pvcInfo{"c1": rwx}, corev1.ConditionFalse, ReasonVirtIOFSNotLiveMigratable, "filesystem data"},
		{"TPM", func() *v1.VirtualMachineInstance {
			v := vmi(masq)
			v.Spec.Domain.Devices.TPM = &v1.TPMDevice{}
			return v
		}(), nil, corev1.ConditionFalse, ReasonNotMigratable, "it has a TPM"},
		{"persistent TPM", func() *v1.VirtualMachineInstance {
			v, yes := vmi(masq), true
			v.Spec.Domain.Devices.TPM = &v1.TPMDevice{Persistent: &yes}
			return v
		}(), nil, corev1.ConditionFalse, ReasonNotMigratable, "backend storage claim persistent-state-for-"},
		{"TPM disabled", func() *v1.VirtualMachineInstance {
			v, no := vmi(masq), false
			v.Spec.Domain.Devices.TPM = &v1.TPMDevice{Enabled: &no}
			return v
		}(), nil, corev1.ConditionTrue, "", ""},
		{"RWO PVC", vmi(masq, pvc("data", "c1", false)), map[string]pvcInfo{"c1": rwo},
			corev1.ConditionFalse, ReasonDisksNotLiveMigratable, "volume data: PVC c1 is not shared"},
		{"ROX PVC read-only", vmi(masq, pvc("data", "c1", true)), map[string]pvcInfo{"c1": rox}, corev1.ConditionTrue, "", ""},
		{"ROX PVC read-write", vmi(masq, pvc("data", "c1", false)), map[string]pvcInfo{"c1": rox},
			corev1.ConditionFalse, ReasonDisksNotLiveMigratable, "PVC c1"},
		{"PVC missing", vmi(masq, pvc("data", "c1", false)), map[string]pvcInfo{"c1": {missing: true}},
			corev1.ConditionFalse, ReasonDisksNotLiveMigratable, "PVC c1 was not found"},
		{"ephemeral on a ROX PVC", vmi(masq, eph("scratch", "c1")), map[string]pvcInfo{"c1": rox}, corev1.ConditionTrue, "", ""},
		{"ephemeral on a RWX PVC", vmi(masq, eph("scratch", "c1")), map[string]pvcInfo{"c1": rwx}, corev1.ConditionTrue, "", ""},
		{"ephemeral on a RWO PVC", vmi(masq, eph("scratch", "c1")), map[string]pvcInfo{"c1": rwo},
			corev1.ConditionFalse, ReasonDisksNotLiveMigratable, "volume scratch: PVC c1 is not shared"},
		{"hostDisk", vmi(masq, v1.Volume{Name: "host", HostDisk: &v1.HostDisk{}}), nil,
			corev1.ConditionFalse, ReasonDisksNotLiveMigratable, "volume host is a hostDisk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := liveMigratable(tc.vmi, tc.pvcs)
			if c.Type != v1.VirtualMachineInstanceIsMigratable || c.Status != tc.status || c.Reason != tc.reason ||
				!strings.Contains(c.Message, tc.message) {
				t.Errorf("condition %+v, want %s %s with %q", c, tc.status, tc.reason, tc.message)
			}
		})
	}
}

// A source launcher that ended because the guest runs on the target
// (Shutoff/Migrated) never ends the VMI.
func TestSourceMigratedKeepsVMI(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{Status: v1.VirtualMachineInstanceStatus{Phase: v1.Running}}
	ApplyStatus(vmi, Observation{Domain: dom(stateShutoff, rpc.DomainReason_Migrated, nil), Now: metav1.Now()})
	if vmi.Status.Phase != v1.Running || vmi.Status.Reason != "" {
		t.Errorf("phase %s reason %q, want Running", vmi.Status.Phase, vmi.Status.Reason)
	}
}
