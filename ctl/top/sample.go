package top

import (
	"context"
	"sync"
	"time"

	"github.com/kemu-dev/kemu/api/subresources"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// getStats is one stats call (ctl/apiclient's Get).
type getStats func(ctx context.Context, namespace, name string) (*subresources.VirtualMachineInstanceStats, error)

// result is one VMI's row or why it has none.
type result struct {
	row Row
	err error
}

// sampleAll measures every VMI: two stats samples window apart each,
// at most parallel calls at a time, each call bounded by callTimeout. The
// results are in vmis' order.
func sampleAll(ctx context.Context, vmis []*v1.VirtualMachineInstance, get getStats, window, callTimeout time.Duration, parallel int) []result {
	out := make([]result, len(vmis))
	slots := make(chan struct{}, parallel)
	call := func(vmi *v1.VirtualMachineInstance) (*subresources.VirtualMachineInstanceStats, error) {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		defer func() { <-slots }()
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		return get(cctx, vmi.Namespace, vmi.Name)
	}
	var wg sync.WaitGroup
	for i, vmi := range vmis {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = sampleOne(ctx, vmi, call, window)
		}()
	}
	wg.Wait()
	return out
}

// sampleOne takes vmi's two samples, window apart from the first's return.
func sampleOne(ctx context.Context, vmi *v1.VirtualMachineInstance,
	call func(*v1.VirtualMachineInstance) (*subresources.VirtualMachineInstanceStats, error), window time.Duration) result {
	before, err := call(vmi)
	if err != nil {
		return result{err: err}
	}
	t := time.NewTimer(window)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return result{err: ctx.Err()}
	}
	after, err := call(vmi)
	if err != nil {
		return result{err: err}
	}
	row, err := ComputeRow(vmi.Namespace, vmi.Name, before, after)
	if err != nil {
		return result{err: err}
	}
	return result{row: row}
}
