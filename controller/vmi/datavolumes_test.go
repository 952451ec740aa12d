package vmi

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kemu-dev/kemu/kube/cdi"
)

func TestDecideClaims(t *testing.T) {
	yes := true
	pvc := func(phase corev1.PersistentVolumeClaimPhase, dvOwner string) *corev1.PersistentVolumeClaim {
		p := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Status: corev1.PersistentVolumeClaimStatus{Phase: phase}}
		if dvOwner != "" {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: cdi.GroupVersion.String(), Kind: cdi.Kind, Name: dvOwner, Controller: &yes}}
		}
		return p
	}
	dv := func(phase cdi.Phase) *cdi.DataVolume {
		return &cdi.DataVolume{Name: "d", Phase: phase, Progress: "45.00%",
			Conditions: []cdi.Condition{{Type: cdi.ConditionRunning, Status: "False", Reason: "Error", Message: "404 Not Found"}}}
	}
	tests := []struct {
		name       string
		cdi        bool
		in         claimInput
		ready, dvs bool
		failed     string // substring
		missing    bool
		waiting    string // substring
	}{
		{name: "CDI: DataVolume succeeded", cdi: true, in: claimInput{dataVolume: true, pvc: pvc(corev1.ClaimBound, "d"), dv: dv(cdi.PhaseSucceeded)}, ready: true, dvs: true},
		{name: "CDI: importing", cdi: true, in: claimInput{dataVolume: true, pvc: pvc(corev1.ClaimBound, "d"), dv: dv(cdi.PhaseImportInProgress)},
			dvs: true, waiting: "is ImportInProgress (45.00%)"},
		{name: "CDI: pending population", cdi: true, in: claimInput{dataVolume: true, pvc: pvc(corev1.ClaimPending, "d"), dv: dv(cdi.PhasePendingPopulation)}, ready: true, dvs: true},
		{name: "CDI: wait for first consumer creates the Pod", cdi: true, in: claimInput{dataVolume: true, pvc: pvc(corev1.ClaimPending, "d"), dv: dv(cdi.PhaseWaitForFirstConsumer)}, ready: true, dvs: true},
		{name: "CDI: failed", cdi: true, in: claimInput{dataVolume: true, pvc: pvc(corev1.ClaimBound, "d"), dv: dv(cdi.PhaseFailed)}, dvs: true, failed: "DataVolume d failed: Error: 404 Not Found"},
		{name: "CDI: failed before its PVC", cdi: true, in: claimInput{dataVolume: true, dv: dv(cdi.PhaseFailed)}, dvs: true, failed: "failed"},
		{name: "CDI: PVC not there yet", cdi: true, in: claimInput{dataVolume: true, dv: dv("ImportScheduled")}, dvs: true, missing: true},
		{name: "CDI: PVC not a DataVolume's is taken as populated", cdi: true, in: claimInput{dataVolume: true, pvc: pvc(corev1.ClaimPending, "")}, ready: true, dvs: true},
		{name: "CDI: owning DataVolume not in the cache", cdi: true, in: claimInput{dataVolume: true, pvc: pvc(corev1.ClaimBound, "d")}, dvs: true, waiting: "DataVolume d (volume v) not found"},
		{name: "CDI: persistentVolumeClaim of a DataVolume waits too", cdi: true, in: claimInput{pvc: pvc(corev1.ClaimBound, "d"), dv: dv(cdi.PhaseImportInProgress)}, dvs: true, waiting: "ImportInProgress"},
		{name: "CDI: plain persistentVolumeClaim", cdi: true, in: claimInput{pvc: pvc(corev1.ClaimPending, "")}, ready: true},
		{name: "no CDI: bound", in: claimInput{dataVolume: true, pvc: pvc(corev1.ClaimBound, "")}, ready: true, dvs: true},
		{name: "no CDI: pending", in: claimInput{dataVolume: true, pvc: pvc(corev1.ClaimPending, "")}, dvs: true, waiting: "PersistentVolumeClaim d (volume v) is Pending"},
		{name: "no CDI: pending on a WaitForFirstConsumer class", in: claimInput{dataVolume: true, pvc: pvc(corev1.ClaimPending, ""), wffcClass: true}, ready: true, dvs: true},
		{name: "no CDI: lost", in: claimInput{dataVolume: true, pvc: pvc(corev1.ClaimLost, "")}, dvs: true, waiting: "is Lost"},
		{name: "no CDI: missing", in: claimInput{dataVolume: true}, dvs: true, missing: true},
		{name: "no CDI: a DataVolume-owned persistentVolumeClaim is a plain claim", in: claimInput{pvc: pvc(corev1.ClaimPending, "d")}, ready: true},
		{name: "no CDI: missing persistentVolumeClaim", in: claimInput{}, missing: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.volume, tt.in.claim = "v", "d"
			r := decideClaims(tt.cdi, []claimInput{tt.in})
			if r.ready != tt.ready || r.dataVolumes != tt.dvs || (r.missing != "") != tt.missing {
				t.Errorf("ready %v, dataVolumes %v, missing %q; want %v, %v, %v", r.ready, r.dataVolumes, r.missing, tt.ready, tt.dvs, tt.missing)
			}
			if (tt.failed == "") != (r.failed == "") || !strings.Contains(r.failed, tt.failed) {
				t.Errorf("failed %q, want %q", r.failed, tt.failed)
			}
			w := strings.Join(r.waiting, "; ")
			if (tt.waiting == "") != (w == "") || !strings.Contains(w, tt.waiting) {
				t.Errorf("waiting %q, want %q", w, tt.waiting)
			}
			c := condDataVolumesReady(r)
			if (c.Status == corev1.ConditionTrue) != r.ready {
				t.Errorf("condition %+v for ready %v", c, r.ready)
			}
		})
	}
}
