package top

import (
	"errors"
	"fmt"

	"github.com/kemu-dev/kemu/api/subresources"
)

// Row is one VMI's line of kemuctl top vmi: rates over the time between
// two stats samples of it.
type Row struct {
	Namespace, Name string
	// CPUPercent is the vCPUs' busy share: their CPU time over the
	// window, per vCPU, in percent (100 is every vCPU always busy).
	CPUPercent float64
	// MemoryUsed and MemoryTotal are the guest's (its balloon driver's,
	// the later sample's); nil when the driver did not report them.
	MemoryUsed, MemoryTotal *int64
	// Bytes per second over the window, summed over the pod-network
	// interfaces (as the guest sees them) and over the VMI's disks.
	NetRx, NetTx, DiskRead, DiskWrite float64
}

// ErrStartedOver: a counter is lower in the later sample, so the figures
// started over between the two (the VMI moved to another node, its
// launcher was replaced); the next run measures again.
var ErrStartedOver = errors.New("its figures started over between the samples (migrated or restarted?); try again")

// ComputeRow is the row of VMI namespace/name from two samples, before
// taken earlier than after (by the node's clock: the samples' Time).
func ComputeRow(namespace, name string, before, after *subresources.VirtualMachineInstanceStats) (Row, error) {
	r := Row{Namespace: namespace, Name: name}
	dt := after.Time.Sub(before.Time.Time).Seconds()
	if dt <= 0 {
		return r, fmt.Errorf("the samples are not apart in time (%s, then %s)", before.Time.UTC(), after.Time.UTC())
	}
	if after.CPU.VCPUs <= 0 {
		return r, errors.New("no vCPU reported")
	}
	if after.CPU.VCPUs != before.CPU.VCPUs {
		return r, ErrStartedOver
	}
	cpu := after.CPU.VCPUNanoSeconds - before.CPU.VCPUNanoSeconds
	if cpu < 0 {
		return r, ErrStartedOver
	}
	r.CPUPercent = float64(cpu) / 1e9 / dt / float64(after.CPU.VCPUs) * 100

	var err error
	if r.NetRx, r.NetTx, err = netRates(before.Interfaces, after.Interfaces, dt); err != nil {
		return r, err
	}
	if r.DiskRead, r.DiskWrite, err = diskRates(before.Drives, after.Drives, dt); err != nil {
		return r, err
	}
	r.MemoryUsed, r.MemoryTotal = after.Memory.GuestUsedBytes, after.Memory.GuestTotalBytes
	if r.MemoryUsed == nil || r.MemoryTotal == nil {
		r.MemoryUsed, r.MemoryTotal = nil, nil
	}
	return r, nil
}

// rates sums, over the items both samples list (by name), the growth of
// two counters per second; a counter that went down means the VMI's
// counters started over.
func rates[T any](before, after []T, dt float64, name func(T) string, counters func(T) (a, b int64)) (ra, rb float64, err error) {
	prev := map[string]T{}
	for _, i := range before {
		prev[name(i)] = i
	}
	var da, db int64
	for _, i := range after {
		p, ok := prev[name(i)]
		if !ok {
			continue
		}
		a0, b0 := counters(p)
		a1, b1 := counters(i)
		if a1 < a0 || b1 < b0 {
			return 0, 0, ErrStartedOver
		}
		da += a1 - a0
		db += b1 - b0
	}
	return float64(da) / dt, float64(db) / dt, nil
}

// netRates are the received and transmitted bytes per second.
func netRates(before, after []subresources.InterfaceStats, dt float64) (rx, tx float64, err error) {
	return rates(before, after, dt, func(i subresources.InterfaceStats) string { return i.Name },
		func(i subresources.InterfaceStats) (int64, int64) { return i.RxBytes, i.TxBytes })
}

// diskRates are the bytes read and written per second.
func diskRates(before, after []subresources.DriveStats, dt float64) (rd, wr float64, err error) {
	return rates(before, after, dt, func(d subresources.DriveStats) string { return d.Name },
		func(d subresources.DriveStats) (int64, int64) { return d.ReadBytes, d.WriteBytes })
}
