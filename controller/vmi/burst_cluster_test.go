//go:build cluster

package vmi

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/controller"
	"github.com/kemu-dev/kemu/controller/template"
	kubeevents "github.com/kemu-dev/kemu/kube/events"
)

// TestStaleCache drives sync by hand with caches that never catch up: the
// Pod expectation stops a second creation while the Pod is not in the
// cache; once the expectation is gone (expired, or a new controller), the
// Pod's fixed name makes a second create fail with AlreadyExists instead of
// making a second Pod.
func TestStaleCache(t *testing.T) {
	ns := newNamespace(t, "stale")
	created := createVMI(t, ns, newVMI("vm1"))
	key := ns + "/vm1"

	w := &writeCounter{}
	cfg := shared.RESTConfig()
	cfg.Wrap(w.wrap)
	cl := clientsFor(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	recorder, stopRecorder, err := kubeevents.NewRecorder(ctx, cl.kube, "kemu-controller")
	if err != nil {
		t.Fatal(err)
	}
	defer stopRecorder()
	inf := controller.NewInformers(cl.kube, cl.kemu, ns, 0) // never started: the caches are what we put in
	vmiInf := inf.Kemu.Kemu().V1alpha1().VirtualMachineInstances()
	podInf := inf.LauncherPods.Core().V1().Pods()
	c, err := New(Config{KubeClient: cl.kube, KemuClient: cl.kemu, VMIInformer: vmiInf, PodInformer: podInf,
		NodeInformer: inf.Kube.Core().V1().Nodes(), PVCInformer: inf.Kube.Core().V1().PersistentVolumeClaims(),
		Template: template.NewService(template.Options{LauncherImage: launcherImage}), Recorder: recorder})
	if err != nil {
		t.Fatal(err)
	}
	if err := vmiInf.Informer().GetIndexer().Add(created); err != nil {
		t.Fatal(err)
	}

	if _, err := c.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	if n := len(launcherPods(t, ns)); n != 1 {
		t.Fatalf("%d pods after the first sync", n)
	}
	if add, _ := c.expectations.Pending(key); add != 1 {
		t.Fatalf("pending creations %d, want 1", add)
	}
	// The caches still show the VMI without phase and no Pod.
	before := w.snapshot()["POST pods"]
	for range 3 {
		res, err := c.sync(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if res.requeueAfter == 0 {
			t.Error("an unsatisfied expectation must requeue")
		}
	}
	if after := w.snapshot()["POST pods"]; after != before {
		t.Fatalf("created %d more pods with an unsatisfied expectation", after-before)
	}

	// Expectation gone (expired, or a new controller), caches still stale:
	// the finalizer patch carries the cached resourceVersion and conflicts,
	// so nothing is created.
	c.expectations.Delete(key)
	if _, err := c.sync(ctx, key); !apierrors.IsConflict(err) {
		t.Fatalf("sync with a stale VMI: %v, want a conflict", err)
	}
	// A cached VMI that already has the finalizer but no phase (the status
	// write of the first sync not seen yet): the create fails with
	// AlreadyExists (the Pod's name is fixed per VMI) and the status write
	// conflicts, is recomputed on the fresh VMI and turns out unneeded.
	stale := created.DeepCopy()
	stale.Finalizers = []string{Finalizer}
	if err := vmiInf.Informer().GetIndexer().Update(stale); err != nil {
		t.Fatal(err)
	}
	c.expectations.Delete(key)
	if _, err := c.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	if n := len(launcherPods(t, ns)); n != 1 {
		t.Fatalf("%d pods after syncs with stale caches and no expectation", n)
	}
	if got := w.snapshot()["POST pods"]; got != before+1 {
		t.Errorf("%d pod creates, want %d (the second refused as AlreadyExists)", got, before+1)
	}
	vmi := waitVMI(t, ns, "vm1", "Scheduling", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Scheduling })
	if len(vmi.Status.PhaseTransitionTimestamps) != 2 {
		t.Errorf("phase timestamps %+v: a stale sync wrote the transition again", vmi.Status.PhaseTransitionTimestamps)
	}
	t.Logf("writes: %v", w.snapshot())
}

type burstStats struct {
	// From the first create: all VMIs created, all Pods exist, all VMIs
	// Scheduling.
	allCreated, allPods, allScheduling time.Duration
	writes                             map[string]int
}

// runBurst creates n VMIs at once (8 parallel clients) and waits for n
// launcher Pods and n VMIs in Scheduling; with restart, the controller is
// stopped once half the Pods exist and a new one (fresh informers and
// expectations, as after a leader change) finishes the job.
func runBurst(t testing.TB, n int, restart bool, qps float32) burstStats {
	ns := newNamespace(t, "burst")
	w := &writeCounter{}
	r := startControllerQPS(t, ns, w, qps)
	ctx := context.Background()

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < n; i += 8 {
				if _, err := admin.kemu.KemuV1alpha1().VirtualMachineInstances(ns).Create(ctx,
					newVMI(fmt.Sprintf("vm-%03d", i)), metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}
		})
	}
	if restart {
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*pollTimeout, true, func(context.Context) (bool, error) {
			return len(launcherPods(t, ns)) >= n/2, nil
		})
		if err != nil {
			t.Fatalf("half the pods did not appear: %v", err)
		}
		r.stop(t)
		t.Logf("controller stopped with %d pods; starting a new one", len(launcherPods(t, ns)))
		r = startControllerQPS(t, ns, w, qps)
	}
	wg.Wait()
	allCreated := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	var st burstStats
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		if st.allPods == 0 && len(launcherPods(t, ns)) >= n {
			st.allPods = time.Since(start)
		}
		list, err := admin.kemu.KemuV1alpha1().VirtualMachineInstances(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, v := range list.Items {
			if v.Status.Phase != v1.Scheduling {
				return false, nil
			}
		}
		return len(list.Items) == n, nil
	})
	if err != nil {
		t.Fatalf("not all %d VMIs reached Scheduling: %v", n, err)
	}
	st.allScheduling = time.Since(start)
	st.allCreated = allCreated
	if st.allPods == 0 { // the last Pods and the VMIs' status appeared between two polls
		st.allPods = st.allScheduling
	}

	pods := launcherPods(t, ns)
	if len(pods) != n {
		t.Fatalf("%d launcher pods for %d VMIs", len(pods), n)
	}
	byVMI := map[string]string{}
	for _, p := range pods {
		uid := p.Labels[launcherpod.CreatedByLabel]
		if other, dup := byVMI[uid]; dup {
			t.Errorf("VMI %s has two pods: %s and %s", uid, other, p.Name)
		}
		byVMI[uid] = p.Name
	}
	list, err := admin.kemu.KemuV1alpha1().VirtualMachineInstances(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range list.Items {
		if byVMI[string(v.UID)] != v.Status.LauncherPod {
			t.Errorf("VMI %s: launcherPod %q, pod %q", v.Name, v.Status.LauncherPod, byVMI[string(v.UID)])
		}
		if !hasFinalizer(&v) {
			t.Errorf("VMI %s has no finalizer", v.Name)
		}
	}
	// Let the event broadcaster flush before counting.
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return w.snapshot()["POST events"] >= n, nil
	})
	st.writes = w.snapshot()
	r.stop(t)
	return st
}

func logBurst(t testing.TB, n int, st burstStats) {
	t.Logf("%d VMIs: all created after %v, all pods after %v, all Scheduling after %v; writes %v",
		n, st.allCreated, st.allPods, st.allScheduling, st.writes)
}

// TestBurst: 200 VMIs at once give exactly 200 Pods, all VMIs Scheduling,
// also when the controller is replaced halfway.
func TestBurst(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			st := runBurst(t, 200, restart, 50)
			logBurst(t, 200, st)
			if !restart && st.writes["POST pods"] != 200 {
				t.Errorf("%d pod creations for 200 VMIs", st.writes["POST pods"])
			}
		})
	}
}

// BenchmarkBurst200 reports the time until 200 launcher Pods exist and the
// controller's API writes per VMI (to Scheduling), with kemu-controller's
// client QPS (50, burst 100: the bound on a burst) and with 500.
func BenchmarkBurst200(b *testing.B) {
	for _, bc := range []struct {
		restart bool
		qps     float32
	}{{false, 50}, {true, 50}, {false, 500}} {
		b.Run(fmt.Sprintf("restart=%v/qps=%v", bc.restart, bc.qps), func(b *testing.B) {
			var created, pods, sched time.Duration
			writes := map[string]int{}
			for range b.N {
				st := runBurst(b, 200, bc.restart, bc.qps)
				created += st.allCreated
				pods += st.allPods
				sched += st.allScheduling
				for k, v := range st.writes {
					writes[k] += v
				}
			}
			per := float64(b.N * 200)
			b.ReportMetric(created.Seconds()/float64(b.N), "s-all-VMIs-created")
			b.ReportMetric(pods.Seconds()/float64(b.N), "s-all-pods")
			b.ReportMetric(sched.Seconds()/float64(b.N), "s-all-scheduling")
			b.ReportMetric(float64(writes["POST pods"])/per, "pod-creates/VMI")
			b.ReportMetric(float64(writes["PATCH virtualmachineinstances"])/per, "finalizer-patches/VMI")
			b.ReportMetric(float64(writes["PUT virtualmachineinstances/status"])/per, "status-writes/VMI")
			b.ReportMetric(float64(writes["POST events"]+writes["PATCH events"])/per, "event-writes/VMI")
			b.ReportMetric(float64(writes["conflicts"])/per, "409s/VMI")
			b.ReportMetric(0, "ns/op")
		})
	}
}
