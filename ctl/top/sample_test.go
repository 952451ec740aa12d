package top

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kemu-dev/kemu/api/subresources"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// fakeStats answers stats from a clock of its own: each VMI's vCPU is
// busy half the time; VMI "broken" fails.
type fakeStats struct {
	mu         sync.Mutex
	open, most int
	calls      map[string][]time.Time
	hold       time.Duration
	failSecond bool
}

func (f *fakeStats) get(ctx context.Context, ns, name string) (*subresources.VirtualMachineInstanceStats, error) {
	now := time.Now()
	f.mu.Lock()
	f.open++
	f.most = max(f.most, f.open)
	f.calls[name] = append(f.calls[name], now)
	n := len(f.calls[name])
	f.mu.Unlock()
	defer func() { f.mu.Lock(); f.open--; f.mu.Unlock() }()
	select {
	case <-time.After(f.hold):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if name == "broken" || (f.failSecond && n == 2) {
		return nil, errors.New("no figures")
	}
	since := now.Sub(t0)
	return &subresources.VirtualMachineInstanceStats{Time: metav1.NewMicroTime(now),
		CPU: subresources.CPUStats{VCPUs: 1, VCPUNanoSeconds: int64(since / 2)}}, nil
}

func vmis(names ...string) []*v1.VirtualMachineInstance {
	var out []*v1.VirtualMachineInstance
	for _, n := range names {
		out = append(out, &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: n}})
	}
	return out
}

func TestSampleAll(t *testing.T) {
	var names []string
	for i := range 20 {
		names = append(names, fmt.Sprintf("vm%02d", i))
	}
	names = append(names, "broken")
	f := &fakeStats{calls: map[string][]time.Time{}, hold: 20 * time.Millisecond}
	const window = 100 * time.Millisecond
	res := sampleAll(context.Background(), vmis(names...), f.get, window, time.Second, 3)
	if f.most > 3 {
		t.Errorf("%d calls at once, want at most 3", f.most)
	}
	for i, r := range res {
		name := names[i]
		if name == "broken" {
			if r.err == nil || len(f.calls[name]) != 1 {
				t.Errorf("broken: %+v after %d calls, want an error after the first", r, len(f.calls[name]))
			}
			continue
		}
		if r.err != nil {
			t.Errorf("%s: %v", name, r.err)
			continue
		}
		c := f.calls[name]
		if len(c) != 2 || c[1].Sub(c[0]) < window {
			t.Errorf("%s: calls at %v, want two %s apart", name, c, window)
		}
		if r.row.Name != name || r.row.CPUPercent < 49 || r.row.CPUPercent > 51 {
			t.Errorf("%s: row %+v, want about 50%% CPU", name, r.row)
		}
	}
}

func TestSampleAllSecondFails(t *testing.T) {
	f := &fakeStats{calls: map[string][]time.Time{}, failSecond: true}
	res := sampleAll(context.Background(), vmis("a"), f.get, time.Millisecond, time.Second, 1)
	if res[0].err == nil {
		t.Errorf("got %+v, want the second sample's error", res[0])
	}
}

func TestSampleAllCancelled(t *testing.T) {
	f := &fakeStats{calls: map[string][]time.Time{}}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	res := sampleAll(ctx, vmis("a", "b"), f.get, time.Hour, time.Second, 1)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %s after the context ended", d)
	}
	for _, r := range res {
		if !errors.Is(r.err, context.DeadlineExceeded) {
			t.Errorf("got %v, want the context's end", r.err)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		o     vmiOptions
		names []string
		ok    bool
	}{
		{vmiOptions{window: DefaultWindow}, nil, true},
		{vmiOptions{window: DefaultWindow, sortBy: SortCPU}, []string{"a"}, true},
		{vmiOptions{window: DefaultWindow, sortBy: SortMemory, allNamespaces: true}, nil, true},
		{vmiOptions{window: DefaultWindow, sortBy: "name"}, nil, false},
		{vmiOptions{window: 0}, nil, false},
		{vmiOptions{window: MaxWindow + time.Second}, nil, false},
		{vmiOptions{window: DefaultWindow, allNamespaces: true}, []string{"a"}, false},
	} {
		if err := tc.o.validate(tc.names); (err == nil) != tc.ok {
			t.Errorf("%+v %v: %v, want ok=%v", tc.o, tc.names, err, tc.ok)
		}
	}
}
