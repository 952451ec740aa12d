package cdi

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	fakediscovery "k8s.io/client-go/discovery/fake"
	fakedynamic "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// fakeDiscovery answers ServerResourcesForGroupVersion from what the test
// sets (CDI installed or not, or an error) and counts the questions.
type fakeDiscovery struct {
	*fakediscovery.FakeDiscovery
	mu        sync.Mutex
	resources []string // datavolumes, datasources, ... of cdi.kubevirt.io/v1beta1; nil: the group is not served
	err       error
	calls     int
}

func newFakeDiscovery() *fakeDiscovery {
	return &fakeDiscovery{FakeDiscovery: &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}}
}

func (f *fakeDiscovery) set(resources []string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resources, f.err = resources, err
}

func (f *fakeDiscovery) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *fakeDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	if gv != GroupVersion.String() || f.resources == nil {
		return nil, apierrors.NewNotFound(GroupVersion.WithResource("").GroupResource(), "")
	}
	list := &metav1.APIResourceList{GroupVersion: gv}
	for _, r := range f.resources {
		kind := map[string]string{Resource: Kind}[r]
		if kind == "" {
			kind = "Other"
		}
		list.APIResources = append(list.APIResources, metav1.APIResource{Name: r, Kind: kind, Namespaced: true})
	}
	return list, nil
}

var errServer = apierrors.NewGenericServerResponse(http.StatusInternalServerError, "get", GroupVersion.WithResource("").GroupResource(), "", "etcd is down", 0, true)

func TestInstalled(t *testing.T) {
	for _, tt := range []struct {
		name      string
		resources []string
		err       error
		want      bool
		wantErr   bool
	}{
		{name: "group not served", want: false},
		{name: "DataVolumes served", resources: []string{"datasources", Resource, Resource + "/status"}, want: true},
		{name: "the group without DataVolumes", resources: []string{"datasources"}, want: false},
		{name: "discovery failing", err: errServer, wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := newFakeDiscovery()
			d.set(tt.resources, tt.err)
			got, err := Installed(context.Background(), d)
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("Installed = %v, %v; want %v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Installed(ctx, newFakeDiscovery()); !errors.Is(err, context.Canceled) {
		t.Errorf("ended context: %v", err)
	}
}

func TestProbe(t *testing.T) {
	d := newFakeDiscovery()
	p := &Probe{Discovery: d, TTL: time.Hour}
	ask := func(want bool, wantErr bool) {
		t.Helper()
		got, err := p.Installed(context.Background())
		if got != want || (err != nil) != wantErr {
			t.Fatalf("Installed = %v, %v; want %v, error %v", got, err, want, wantErr)
		}
	}
	d.set(nil, errServer)
	ask(false, true) // an error is not remembered
	d.set([]string{Resource}, nil)
	ask(true, false)
	d.set(nil, nil)
	ask(true, false) // remembered for TTL
	if n := d.count(); n != 2 {
		t.Errorf("%d discoveries, want 2", n)
	}
	p.TTL = 0 // expired: asked again
	ask(false, false)
	if n := d.count(); n != 3 {
		t.Errorf("%d discoveries, want 3", n)
	}
}

func dataVolume(ns, name string, phase Phase, conds ...map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"phase": string(phase), "progress": "45.00%"}}}
	if conds != nil {
		var cs []any
		for _, c := range conds {
			cs = append(cs, c)
		}
		u.Object["status"].(map[string]any)["conditions"] = cs
	}
	u.SetGroupVersionKind(GVK)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func TestFromUnstructured(t *testing.T) {
	u := dataVolume("ns", "d", PhaseFailed,
		map[string]any{"type": ConditionRunning, "status": "False", "reason": "Error", "message": "404"},
		map[string]any{"type": ConditionReady, "status": "False"},
		map[string]any{"type": int64(7)}) // not a string: read as empty
	u.SetUID("u1")
	dv := FromUnstructured(u)
	want := &DataVolume{Namespace: "ns", Name: "d", UID: "u1", Phase: PhaseFailed, Progress: "45.00%",
		Conditions: []Condition{{Type: ConditionRunning, Status: "False", Reason: "Error", Message: "404"},
			{Type: ConditionReady, Status: "False"}, {}}}
	if !reflect.DeepEqual(dv, want) {
		t.Errorf("got %+v\nwant %+v", dv, want)
	}
	if m := dv.FailureMessage(); m != "DataVolume d failed: Error: 404" {
		t.Errorf("FailureMessage %q", m)
	}
	if m := (&DataVolume{Name: "d", Phase: PhaseFailed}).FailureMessage(); m != "DataVolume d failed" {
		t.Errorf("FailureMessage without conditions %q", m)
	}
}

func TestErrorAndProvisioning(t *testing.T) {
	running := func(reason string) Condition {
		return Condition{Type: ConditionRunning, Status: "False", Reason: reason}
	}
	bound := Condition{Type: ConditionBound, Status: "True"}
	for _, tt := range []struct {
		name                   string
		dv                     DataVolume
		hasError, provisioning bool
	}{
		{name: "no phase yet", dv: DataVolume{}, provisioning: true},
		{name: "importing", dv: DataVolume{Phase: PhaseImportInProgress}, provisioning: true},
		{name: "succeeded", dv: DataVolume{Phase: PhaseSucceeded}},
		{name: "pending population", dv: DataVolume{Phase: PhasePendingPopulation}},
		{name: "waits for its first consumer", dv: DataVolume{Phase: PhaseWaitForFirstConsumer}},
		{name: "waits for its first consumer, bound", dv: DataVolume{Phase: PhaseWaitForFirstConsumer, Conditions: []Condition{bound}}, provisioning: true},
		{name: "failed", dv: DataVolume{Phase: PhaseFailed}, hasError: true, provisioning: true},
		{name: "importer error", dv: DataVolume{Phase: PhaseImportInProgress, Conditions: []Condition{running("Error")}}, hasError: true, provisioning: true},
		{name: "image pull failed", dv: DataVolume{Phase: PhaseImportInProgress, Conditions: []Condition{running("ImagePullFailed")}}, hasError: true, provisioning: true},
		{name: "importer completed", dv: DataVolume{Phase: PhaseSucceeded, Conditions: []Condition{running("Completed")}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.dv.HasError(); got != tt.hasError {
				t.Errorf("HasError = %v", got)
			}
			if got := tt.dv.Provisioning(); got != tt.provisioning {
				t.Errorf("Provisioning = %v", got)
			}
		})
	}
}

// watcherUnderTest runs a Watcher on fake clients, counting OnChange calls
// and DataVolume events.
type watcherUnderTest struct {
	w       *Watcher
	disc    *fakeDiscovery
	changes atomic.Int32
	adds    atomic.Int32
}

func startWatcher(t *testing.T, recheck time.Duration, objs ...runtime.Object) *watcherUnderTest {
	t.Helper()
	disc := newFakeDiscovery()
	dyn := fakedynamic.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{GVR: Kind + "List"}, objs...)
	wt := &watcherUnderTest{disc: disc}
	wt.w = NewWatcher(disc, dyn, "", 0, recheck)
	wt.w.OnChange(func() { wt.changes.Add(1) })
	wt.w.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { wt.adds.Add(1) }})
	return wt
}

func (wt *watcherUnderTest) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); wt.w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

func stateIs(w *Watcher, installed, ready bool) func() bool {
	return func() bool { i, r := w.State(); return i == installed && r == ready }
}

// TestWatcher: CDI absent, then appearing (Recheck), then going (the
// periodic re-check): State follows, the informer's cache serves Get and
// its events, and every change calls OnChange once the cache has synced.
func TestWatcher(t *testing.T) {
	wt := startWatcher(t, time.Hour, dataVolume("ns", "d", PhaseSucceeded))
	if i, r := wt.w.State(); i || r {
		t.Fatalf("State before Run = %v, %v", i, r)
	}
	if _, _, err := wt.w.Get("ns", "d"); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Get before Run: %v", err)
	}
	wt.run(t)
	eventually(t, "CDI known absent", stateIs(wt.w, false, true))
	eventually(t, "the first OnChange", func() bool { return wt.changes.Load() == 1 })
	if _, _, err := wt.w.Get("ns", "d"); !errors.Is(err, ErrNotReady) {
		t.Errorf("Get without CDI: %v", err)
	}

	// CDI appears: a Recheck (as after a create answered NotFound) finds it.
	wt.disc.set([]string{Resource}, nil)
	wt.w.Recheck()
	eventually(t, "CDI installed and synced", stateIs(wt.w, true, true))
	eventually(t, "OnChange after the sync", func() bool { return wt.changes.Load() == 2 })
	eventually(t, "the DataVolume's add event", func() bool { return wt.adds.Load() == 1 })
	dv, ok, err := wt.w.Get("ns", "d")
	if err != nil || !ok || dv.Phase != PhaseSucceeded {
		t.Fatalf("Get = %+v, %v, %v", dv, ok, err)
	}
	if _, ok, err := wt.w.Get("ns", "other"); ok || err != nil {
		t.Errorf("Get of a missing one = %v, %v", ok, err)
	}

	// A failing discovery keeps what was known, and calls nobody.
	calls := wt.disc.count()
	wt.disc.set(nil, errServer)
	wt.w.Recheck()
	eventually(t, "the failing discovery", func() bool { return wt.disc.count() > calls })
	if i, r := wt.w.State(); !i || !r || wt.changes.Load() != 2 {
		t.Errorf("after a failing discovery: State %v, %v, %d changes", i, r, wt.changes.Load())
	}

	// CDI goes: the informer stops, Get is not ready, OnChange is called.
	wt.disc.set(nil, nil)
	wt.w.Recheck()
	eventually(t, "CDI gone", stateIs(wt.w, false, true))
	eventually(t, "OnChange when CDI went", func() bool { return wt.changes.Load() == 3 })
	if _, _, err := wt.w.Get("ns", "d"); !errors.Is(err, ErrNotReady) {
		t.Errorf("Get after CDI went: %v", err)
	}

	// Unchanged answers call nobody.
	calls = wt.disc.count()
	wt.w.Recheck()
	eventually(t, "another discovery", func() bool { return wt.disc.count() > calls })
	if n := wt.changes.Load(); n != 3 {
		t.Errorf("%d OnChange calls after an unchanged answer", n)
	}
}

// TestWatcherRecheckPeriod: without Recheck, the periodic re-check finds
// CDI installed later.
func TestWatcherRecheckPeriod(t *testing.T) {
	wt := startWatcher(t, 20*time.Millisecond)
	wt.run(t)
	eventually(t, "CDI known absent", stateIs(wt.w, false, true))
	wt.disc.set([]string{Resource}, nil)
	eventually(t, "CDI found by the periodic re-check", stateIs(wt.w, true, true))
	eventually(t, "OnChange", func() bool { return wt.changes.Load() == 2 })
}
