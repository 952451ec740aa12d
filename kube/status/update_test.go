package status

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

var vmiResource = schema.GroupResource{Group: "kemu.dev", Resource: "virtualmachineinstances"}

// apiServer is the status subresource of one VMI, as far as Update's logic
// needs it: a conflict while another writer is ahead, then the stored object.
type apiServer struct {
	stored *v1.VirtualMachineInstance // nil: not found
	// conflicts: how many UpdateStatus calls lose to "another writer",
	// which sets status.reason to "other" each time.
	conflicts int
	// replaceOnConflict: the other writer deleted the VMI and made a new
	// one of the same name.
	replaceOnConflict bool
	// deleteOnConflict: the other writer deleted the VMI.
	deleteOnConflict bool
	updateErr        error
	gets, updates    int
}

func (s *apiServer) Get(_ context.Context, name string, _ metav1.GetOptions) (*v1.VirtualMachineInstance, error) {
	s.gets++
	if s.stored == nil {
		return nil, apierrors.NewNotFound(vmiResource, name)
	}
	return s.stored.DeepCopy(), nil
}

func (s *apiServer) UpdateStatus(_ context.Context, obj *v1.VirtualMachineInstance, _ metav1.UpdateOptions) (*v1.VirtualMachineInstance, error) {
	s.updates++
	if s.updateErr != nil {
		return nil, s.updateErr
	}
	if s.conflicts > 0 {
		s.conflicts--
		s.stored.Status.Reason = "other"
		s.stored.ResourceVersion += "+"
		if s.replaceOnConflict {
			s.stored.UID = "new-uid"
		}
		if s.deleteOnConflict {
			s.stored = nil
		}
		return nil, apierrors.NewConflict(vmiResource, obj.Name, errors.New("the object has been modified"))
	}
	out := obj.DeepCopy()
	out.ResourceVersion += "+"
	s.stored = out.DeepCopy()
	return out, nil
}

func TestUpdate(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "uid", ResourceVersion: "1"}}
	setRunning := func(v *v1.VirtualMachineInstance) { v.Status.Phase = v1.Running }
	for _, tc := range []struct {
		name   string
		server apiServer
		mutate func(*v1.VirtualMachineInstance)
		// want: written, its status (phase, reason), conflicts, Gets and
		// UpdateStatus calls, and the error.
		written             bool
		phase               v1.VirtualMachineInstancePhase
		reason              string
		conflicts           int
		gets, updates       int
		conflictErr, notFnd bool
	}{
		{name: "no change, no write", server: apiServer{stored: vmi.DeepCopy()}, mutate: func(*v1.VirtualMachineInstance) {}},
		{name: "a change is written", server: apiServer{stored: vmi.DeepCopy()}, mutate: setRunning,
			written: true, phase: v1.Running, updates: 1},
		{name: "a conflict re-reads and keeps the other writer's field", server: apiServer{stored: vmi.DeepCopy(), conflicts: 1},
			mutate: setRunning, written: true, phase: v1.Running, reason: "other", conflicts: 1, gets: 1, updates: 2},
		{name: "gone after a conflict: not written", server: apiServer{stored: vmi.DeepCopy(), conflicts: 1, deleteOnConflict: true},
			mutate: setRunning, conflicts: 1, gets: 1, updates: 1},
		{name: "replaced after a conflict: not written", server: apiServer{stored: vmi.DeepCopy(), conflicts: 1, replaceOnConflict: true},
			mutate: setRunning, conflicts: 1, gets: 1, updates: 1},
		{name: "conflicts to the end", server: apiServer{stored: vmi.DeepCopy(), conflicts: 100}, mutate: setRunning,
			conflicts: retry.DefaultRetry.Steps, gets: retry.DefaultRetry.Steps - 1, updates: retry.DefaultRetry.Steps, conflictErr: true},
		{name: "another error is returned wrapped", server: apiServer{stored: vmi.DeepCopy(), updateErr: apierrors.NewNotFound(vmiResource, "a")},
			mutate: setRunning, updates: 1, notFnd: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.server
			orig := vmi.DeepCopy()
			res, err := Update(context.Background(), &s, vmi, tc.mutate)
			if tc.conflictErr != apierrors.IsConflict(err) || tc.notFnd != apierrors.IsNotFound(err) ||
				(err == nil) != (!tc.conflictErr && !tc.notFnd) {
				t.Fatalf("err = %v", err)
			}
			if err != nil && !strings.Contains(err.Error(), "ns/a") {
				t.Errorf("error %q does not name the object", err)
			}
			if res.Written != tc.written || res.Conflicts != tc.conflicts || s.gets != tc.gets || s.updates != tc.updates {
				t.Errorf("written %v, conflicts %d, gets %d, updates %d; want %v, %d, %d, %d",
					res.Written, res.Conflicts, s.gets, s.updates, tc.written, tc.conflicts, tc.gets, tc.updates)
			}
			if tc.written {
				if res.After.Status.Phase != tc.phase || res.After.Status.Reason != tc.reason {
					t.Errorf("written status %+v", res.After.Status)
				}
				if res.Before.Status.Phase != "" || res.Before.ResourceVersion != s.stored.ResourceVersion[:len(s.stored.ResourceVersion)-1] {
					t.Errorf("Before = rv %q, phase %q: not the object the write replaced", res.Before.ResourceVersion, res.Before.Status.Phase)
				}
			}
			if !equality.Semantic.DeepEqual(orig, vmi) {
				t.Error("the object passed in was changed")
			}
		})
	}
}

func TestWrites(t *testing.T) {
	var w Writes
	for _, tc := range []struct {
		what string
		do   func()
		rv   string
		want bool
	}{
		{"nothing recorded", func() {}, "1", false},
		{"the cache still shows the version the write replaced", func() { w.Record("ns/a", "1") }, "1", true},
		{"still stale", func() {}, "1", true},
		{"a newer version ends the record", func() {}, "2", false},
		{"so the old version no longer counts", func() {}, "1", false},
		{"forgotten", func() { w.Record("ns/a", "3"); w.Forget("ns/a") }, "3", false},
	} {
		tc.do()
		if got := w.Stale("ns/a", tc.rv); got != tc.want {
			t.Errorf("%s: Stale(%q) = %v, want %v", tc.what, tc.rv, got, tc.want)
		}
	}
}
