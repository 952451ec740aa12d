package vmi

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func TestMigratedAway(t *testing.T) {
	state := func(src string, completed, failed bool) *v1.VirtualMachineInstanceMigrationState {
		return &v1.VirtualMachineInstanceMigrationState{MigrationUID: "m1", SourcePod: src, TargetPod: "tgt", Completed: completed, Failed: failed}
	}
	for _, tc := range []struct {
		name     string
		launcher string
		ms       *v1.VirtualMachineInstanceMigrationState
		pod      string
		want     bool
	}{
		{"no migration", "src", nil, "src", false},
		{"the launcher Pod is another Pod", "tgt", nil, "src", true},
		{"the current launcher Pod", "tgt", state("src", true, false), "tgt", false},
		{"source of a completed migration", "src", state("src", true, false), "src", true},
		{"source of a running migration", "src", state("src", false, false), "src", false},
		{"source of a failed migration", "src", state("src", true, true), "src", false},
		{"another Pod named as source", "src", state("other", true, false), "src", false},
		{"no Pod name", "", state("", true, false), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vmi := &v1.VirtualMachineInstance{Status: v1.VirtualMachineInstanceStatus{LauncherPod: tc.launcher, MigrationState: tc.ms}}
			if got := migratedAway(vmi, tc.pod); got != tc.want {
				t.Errorf("migratedAway(%q) = %v, want %v", tc.pod, got, tc.want)
			}
		})
	}
}

func TestCurrentPodSkipsTargets(t *testing.T) {
	target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "tgt", Labels: map[string]string{launcherpod.MigrationUIDLabel: "m1"}}}
	source := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "src"}}
	vmi := &v1.VirtualMachineInstance{}
	if got := currentPod(vmi, []*corev1.Pod{target}); got != nil {
		t.Errorf("a target Pod alone is no launcher Pod: got %s", got.Name)
	}
	if got := currentPod(vmi, []*corev1.Pod{target, source}); got != source {
		t.Errorf("currentPod = %v, want the source", got)
	}
	vmi.Status.LauncherPod = "tgt"
	if got := currentPod(vmi, []*corev1.Pod{source, target}); got != target {
		t.Errorf("named by launcherPod: currentPod = %v, want the target", got)
	}
}
